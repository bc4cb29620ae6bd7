"""A model response turned into stored events.

``response_events`` gives the events of a response, or the ``ModelError`` that says why it
cannot be turned into events (a field a provider left empty: the run ends in ERROR with the
raw response kept). ``store_calls`` stores a response's calls with PROJECT-DUP-CALL and
LINK-UNIQUE checked before anything is stored or run: a call id already used on the path is
renamed (recorded as a ``call_ids`` fact), a call repeated within the response is answered by
an error and not run.
"""

from __future__ import annotations

from pydantic import ValidationError

from treadle.events.fact_keys import CALL_IDS_KEY
from treadle.events.model import ActionEvent, MessageEvent
from treadle.runtime.agent import Agent, duplicate_call_error, unique_call_ids
from treadle.runtime.llm.base import ModelError, ModelResponse
from treadle.runtime.log import ConversationLog


def response_events(
    agent: Agent, response: ModelResponse
) -> list[MessageEvent] | list[ActionEvent] | ModelError:
    """The events of ``response``, or why it cannot be turned into events."""
    try:
        return agent.response_events(response)
    except ValidationError as error:  # e.g. a field a provider left empty
        problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        return ModelError(
            f"model {agent.model.name} sent a response the runtime cannot turn into events: "
            f"{problem}",
            raw=repr(response),
        )


def store_calls(
    log: ConversationLog,
    response: ModelResponse,
    actions: list[ActionEvent],
    used_call_ids: set[str],
) -> list[ActionEvent]:
    """Store the response's ``actions``; those that may run (see the module docstring)."""
    checked = unique_call_ids(actions, used_call_ids)
    stored: list[ActionEvent] = log.append(checked.actions)  # type: ignore[assignment]
    if checked.renamed:
        log.record_fact(CALL_IDS_KEY, {"llm_response_id": response.id, "renamed": checked.renamed})
    not_run = {action.id for action in checked.not_run}
    originals = {item["action_id"]: item["original"] for item in checked.renamed}
    for action in stored:
        if action.id in not_run:
            log.append([duplicate_call_error(action, originals[action.id])])
    return [action for action in stored if action.id not in not_run]
