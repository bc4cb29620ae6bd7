"""The agent: asks the model for the next move and turns it into events; runs tool calls.

It never touches the store: the conversation decides where events go and when. One model
response's k tool calls become k actions sharing ``llm_response_id`` (shared text on the first).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

from treadle.data.settings import DEFAULT_SYSTEM_PROMPT as DEFAULT_SYSTEM_PROMPT  # settings data
from treadle.events.json_limits import JsonLimitError, load_json
from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    MessageEvent,
    ObservationEvent,
    SystemPromptEvent,
)
from treadle.runtime.interrupts import (
    ABANDON_GRACE_S,
    Abandoned,
    in_thread,
    result_unless_interrupted,
)
from treadle.runtime.llm.base import LanguageModel, ModelRequest, ModelResponse
from treadle.runtime.text import storable_text
from treadle.runtime.tools import ToolCallError, ToolContext, ToolSet


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What running one action produced: its result event and whether it ends the turn."""

    event: ObservationEvent | AgentErrorEvent
    ends_turn: bool = False
    failure: str | None = None
    """Set when the tool failed in a way that is not the model's to fix (the run stops)."""


@dataclass
class Agent:
    model: LanguageModel
    tools: ToolSet
    system_prompt: str = DEFAULT_SYSTEM_PROMPT

    def system_prompt_event(self) -> SystemPromptEvent:
        return SystemPromptEvent(text=self.system_prompt, tools=self.tools.openai_schemas())

    def ask(
        self, messages: Sequence[dict[str, Any]], *, responses_before: int | None = None
    ) -> ModelResponse:
        """The model's next response to a step's ``messages``; ``responses_before``: the
        responses already on the active path (``ModelRequest``)."""
        tools = self.tools.openai_schemas()
        return self.model.complete(ModelRequest(messages, tools, "step", responses_before))

    @staticmethod
    def response_events(response: ModelResponse) -> list[MessageEvent] | list[ActionEvent]:
        """A text answer as one agent message, or the k calls as k actions (no parents yet)."""
        if not response.tool_calls:
            return [
                MessageEvent(
                    source="agent",
                    text=response.text,
                    reasoning=response.reasoning,
                    llm_response_id=response.id,
                    usage=response.usage,
                )
            ]
        actions = []
        for index, call in enumerate(response.tool_calls):
            first = index == 0
            actions.append(
                ActionEvent(
                    llm_response_id=response.id,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    arguments=_parse_arguments(call.arguments),
                    raw_arguments=call.arguments,
                    # PROJECT-SHARED-TEXT: the response's text travels on its first call only.
                    thought=response.text if first else "",
                    reasoning=response.reasoning if first else None,
                    usage=response.usage if first else None,
                )
            )
        return actions

    def run_calls(
        self,
        actions: Sequence[ActionEvent],
        context: ToolContext,
        *,
        should_start: Callable[[], bool] = lambda: True,
    ) -> Iterator[CallOutcome]:
        """Run ``actions`` and yield their outcomes in call order (docs/contracts.md, RUN).

        Calls run in parallel threads when every tool says it is safe; otherwise one by one,
        and ``should_start`` is asked before each (a pause stops before the next call).
        A batch is not a transaction: one failed call does not undo another. When the run is
        interrupted (``context.interruption``), a parallel call that does not return within
        ``ABANDON_GRACE_S`` is abandoned: it is answered as interrupted, its thread left to end.
        """
        names = [action.tool_name for action in actions]
        if len(actions) > 1 and self.tools.can_run_in_parallel(names):
            # Threads of their own, daemons: on an interrupt (the user's, Ctrl-C, SIGTERM) the
            # run ends now, not when the slowest call ends, and never waits for it at exit.
            futures = [
                in_thread(partial(self._run_one, action, context), f"treadle-call-{action.id[:8]}")
                for action in actions
            ]
            for action, future in zip(actions, futures, strict=True):  # call order
                try:
                    yield result_unless_interrupted(future, context.interruption)
                except Abandoned:
                    yield CallOutcome(interrupted_error(action, "user", ABANDONED))
            return
        for action in actions:
            if not should_start():
                return
            yield self._run_one(action, context)

    def _run_one(self, action: ActionEvent, context: ToolContext) -> CallOutcome:
        try:
            arguments = self.tools.validate(
                action.tool_name, action.arguments, action.raw_arguments, secrets=context.secrets
            )
            result = self.tools.execute(action.tool_name, arguments, replace(context, call=action))
        except ToolCallError as error:
            return CallOutcome(error.to_agent_error(action))
        except Exception as error:  # a tool's own bug: recorded as the call's result, run stops
            message = storable_text(context.secrets.mask(f"{type(error).__name__}: {error}"))
            return CallOutcome(
                AgentErrorEvent(
                    tool_call_id=action.tool_call_id,
                    tool_name=action.tool_name,
                    action_id=action.id,
                    error=f"The tool failed unexpectedly: {message}",
                ),
                failure=f"tool {action.tool_name} failed: {message}",
            )
        return CallOutcome(result.to_observation(action), ends_turn=result.ends_turn)


@dataclass(frozen=True, slots=True)
class CallIdCheck:
    """A response's actions with call ids that are unique (PROJECT-DUP-CALL,
    LINK-UNIQUE), and what had to change to make them so."""

    actions: list[ActionEvent]
    not_run: list[ActionEvent]
    """Repeats of a call id inside the response: answered with an agent error, never run."""
    renamed: list[dict[str, str]]
    """``{"action_id", "original", "id", "contract"}`` for each call whose id was replaced."""


def unique_call_ids(actions: Sequence[ActionEvent], used: set[str]) -> CallIdCheck:
    """Give each call an id not in ``used`` (the ids on the path) nor used earlier in the same
    response, so that one bad response can never make the log unprojectable.

    A provider that reuses ids across responses (LINK-UNIQUE) gets its calls renamed and run;
    a repeated id inside one response (PROJECT-DUP-CALL) may be the same call sent twice, so
    the repeat is renamed and answered with an error the model can react to, not run."""
    seen: set[str] = set()
    checked: list[ActionEvent] = []
    not_run: list[ActionEvent] = []
    renamed: list[dict[str, str]] = []
    for action in actions:
        original = action.tool_call_id
        contract = (
            "PROJECT-DUP-CALL" if original in seen else "LINK-UNIQUE" if original in used else None
        )
        if contract is not None:
            number = 2
            while (fresh := f"{original}~{number}") in seen or fresh in used:
                number += 1
            action = action.model_copy(update={"tool_call_id": fresh})
            renamed.append(
                {"action_id": action.id, "original": original, "id": fresh, "contract": contract}
            )
            if contract == "PROJECT-DUP-CALL":
                not_run.append(action)
        seen.add(action.tool_call_id)
        checked.append(action)
    return CallIdCheck(checked, not_run, renamed)


def duplicate_call_error(action: ActionEvent, original: str) -> AgentErrorEvent:
    """The answer to a call whose id repeated another call's id in the same response."""
    return AgentErrorEvent(
        tool_call_id=action.tool_call_id,
        tool_name=action.tool_name,
        action_id=action.id,
        error=(
            f"This call was not run: its id {original!r} was already used by another call in "
            f"the same response (PROJECT-DUP-CALL), so it was renamed {action.tool_call_id!r}. "
            "If you meant to make it, call it again; give every call its own id."
        ),
    )


def _parse_arguments(raw: str) -> dict[str, Any] | None:
    """The JSON object the model sent, or None when it is not one, or not one an event can
    hold (NaN, too deep, ...: ``json_limits``); the raw text is kept on the action."""
    try:
        value = load_json(raw) if raw.strip() else {}
    except (json.JSONDecodeError, JsonLimitError):
        return None
    return value if isinstance(value, dict) else None


InterruptedBy = Literal["user", "crash"]

INTERRUPTED_BY_USER = (
    "This call was interrupted by the user: it was stopped before it returned (a command and "
    "the processes it started were killed). It may or may not have taken effect: check the "
    "workspace before repeating it."
)
INTERRUPTED_BY_CRASH = (
    "This call was interrupted (the run stopped before it returned). It may or may not "
    "have taken effect: check the workspace before repeating it."
)
STOPPED_OUTPUT = "\nWhat it returned once stopped:\n"
"""Between an interrupted call's error and what the call returned once stopped."""

ABANDONED = (
    f"[it did not stop within {ABANDON_GRACE_S:g} s of the interrupt: it was abandoned, and "
    "whatever it still does is not recorded]"
)
NOT_STARTED_BY_USER = (
    "This call was not run: the user paused or interrupted the run before it started. Make "
    "it again if it is still needed."
)


def interrupted_error(
    action: ActionEvent, by: InterruptedBy = "crash", output: str = "", *, started: bool = True
) -> AgentErrorEvent:
    """The agent error that closes a call the user interrupted (``by="user"``, with the
    ``output`` it gave once stopped, if any; ``started`` False: it never ran) or a crash or
    kill left without a result (RUN)."""
    if by == "user":
        error = INTERRUPTED_BY_USER if started else NOT_STARTED_BY_USER
    else:
        error = INTERRUPTED_BY_CRASH
    if output:
        error += STOPPED_OUTPUT + output
    return AgentErrorEvent(
        tool_call_id=action.tool_call_id,
        tool_name=action.tool_name,
        action_id=action.id,
        error=storable_text(error),
        interrupted=by,
    )
