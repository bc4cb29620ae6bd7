"""A batch of the model's calls run, and calls left without a result closed.

``run_batch`` runs the calls of one model response and stores each answer as it comes (an
interrupt turns it into an ``interrupted: "user"`` error, a pause before a call starts answers
that call as not started), so that every call of the batch is answered when it returns; what
the run does next (finish, error, stuck, pause) is the ``Conversation``'s to decide from the
``BatchOutcome``. ``close_open_calls`` answers calls a failure, a stop or a crash left open,
so the projection stays valid (LINK-PENDING: nothing stays open by accident).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from treadle.events.links import pending_actions
from treadle.events.model import ActionEvent, AgentErrorEvent, ObservationEvent
from treadle.runtime.agent import Agent, InterruptedBy, interrupted_error
from treadle.runtime.extensions.chain import RunExtensions
from treadle.runtime.log import ConversationLog
from treadle.runtime.requests import PauseRequest
from treadle.runtime.text import storable_text
from treadle.runtime.tools import ToolContext

NOT_STARTED_BY_STOP = (
    "This call was not run: the run stopped before it started ({why}). Make it again if it "
    "is still needed."
)


@dataclass(frozen=True)
class BatchOutcome:
    """What a batch's answers say about the run: whether a call ended the agent's turn
    (``finish``) and the first failure a tool reported (the run ends in ERROR with it)."""

    ended_turn: bool
    failure: str | None


def run_batch(
    actions: Sequence[ActionEvent],
    *,
    agent: Agent,
    context: ToolContext,
    log: ConversationLog,
    extensions: RunExtensions,
    pause: PauseRequest,
) -> BatchOutcome:
    """Run ``actions`` and store an answer for each (a pause keeps the next ones from
    starting: they are answered as not started)."""
    ended_turn = False
    failure = None
    answered: set[str] = set()
    by_call = {action.tool_call_id: action for action in actions}
    interruption = context.interruption
    for outcome in agent.run_calls(actions, context, should_start=lambda: not pause.is_set()):
        event = outcome.event
        if isinstance(event, AgentErrorEvent) and event.interrupted == "user":
            pass  # abandoned after the interrupt: already says so
        elif interruption.is_set():
            # Stopped by the user (or ended as the interrupt came): the model is told so,
            # with what the tool returned once stopped; a failure it caused is no failure.
            returned = event.content if isinstance(event, ObservationEvent) else event.error
            event = interrupted_error(by_call[event.tool_call_id], "user", returned)
        else:
            ended_turn = ended_turn or outcome.ends_turn
            failure = failure or outcome.failure
            event = extensions.after_call(by_call[event.tool_call_id], event)
        log.append([event])
        answered.add(event.tool_call_id)
    for action in actions:
        if action.tool_call_id not in answered:  # paused before it started: close it
            log.append([_not_started(action, pause)])
    extensions.after_batch(actions)  # every call answered
    return BatchOutcome(ended_turn, failure)


def _not_started(action: ActionEvent, pause: PauseRequest) -> AgentErrorEvent:
    """The answer to a call a pause kept from starting: never a crash (it never ran)."""
    if pause.by_user():
        return interrupted_error(action, "user", started=False)
    why = pause.reason() or "this process stopped its run"
    return AgentErrorEvent(
        tool_call_id=action.tool_call_id,
        tool_name=action.tool_name,
        action_id=action.id,
        error=storable_text(NOT_STARTED_BY_STOP.format(why=why)),
    )


def close_open_calls(
    log: ConversationLog,
    by: InterruptedBy | None,
    reason: str | None = None,
    *,
    only: Collection[str] | None = None,
) -> None:
    """Answer every call of the active path without a result (``only``: of these ids) with an
    agent error: interrupted ``by`` the user or a crash, or (None) with ``reason`` as its text."""
    for action in pending_actions(log.path()):
        if only is not None and action.id not in only:
            continue
        event = interrupted_error(action, by or "crash")
        if by is None:
            event = event.model_copy(update={"error": reason or event.error, "interrupted": None})
        log.append([event])


def finish_message(actions: Sequence[ActionEvent]) -> str:
    """What the agent said as it called ``finish`` (a Stop hook's ``last_assistant_message``)."""
    for action in actions:
        if action.tool_name == "finish" and action.arguments is not None:
            return str(action.arguments.get("message", ""))
    return ""
