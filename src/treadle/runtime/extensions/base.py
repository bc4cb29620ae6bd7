"""The run-extension protocol: the typed points of a conversation's run loop that a capability
(hooks, skills, budgets, condensation, snapshots, …) plugs into, and what it sees of the run
there (``RunScope``).

Each point has a default that does nothing, so a capability implements only the points it
needs. The loop calls every extension at each point in one fixed order
(``extensions.run_extensions``); what an extension adds to the log it appends through the
scope's log, so every event is chained onto the head and checked like the loop's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    SystemPromptEvent,
    UserRejectionEvent,
)
from treadle.runtime.condense.context import ContextView
from treadle.runtime.llm.base import ContextWindowExceeded
from treadle.runtime.log import ConversationLog
from treadle.store.base import ConversationInfo

_T = TypeVar("_T")

CallResult = ObservationEvent | AgentErrorEvent
"""What answers a call that ran (or was stopped): the tool's result, or an error."""

MADE_ROOM: Literal[True] = True
"""``after_refusal``'s answer when the extension shrank what the next request holds: the
request is made again."""


@dataclass
class RunScope:
    """What an extension may use of the conversation it serves: its log (append events,
    record facts, read the active path), the view of the model's context the loop follows,
    and the model-call thread (a call made there is abandoned when the user interrupts)."""

    log: ConversationLog
    context: ContextView
    model_thread: Callable[[Callable[[], object]], object]
    """Runs a call in the run's model-call thread (see ``in_model_thread``)."""
    step_row: ConversationInfo | None = None
    """The conversation's row as the step began (read once for the step's requests), for the
    first check before the step's model call (``conversation_row``)."""

    def conversation_row(self) -> ConversationInfo:
        """The conversation's stored row (budgets, usage totals): the step's, read as it began,
        the first time it is asked for in a step; else read now (a summary call since, or
        another process, may have changed it)."""
        row, self.step_row = self.step_row, None
        return row if row is not None else self.log.store.get_conversation(self.log.id)

    @property
    def conversation_id(self) -> str:
        return self.log.id

    def in_model_thread(self, call: Callable[[], _T]) -> _T:
        """``call`` (a model call) in the run's model-call thread: ``Abandoned`` when the user
        interrupts the run, before it starts or while it runs."""
        return self.model_thread(call)  # type: ignore[return-value]

    def followed(self) -> ContextView:
        """The context view brought up to the active path's end."""
        self.context.follow(self.log.path())
        return self.context


@dataclass
class Screened:
    """A response's calls after the extensions screened them: those that may go on, the
    rejections of those they blocked, and whether one asked for the user's confirmation."""

    allowed: list[ActionEvent]
    rejections: list[UserRejectionEvent] = field(default_factory=list)
    ask: bool = False


class RunExtension:
    """A capability of the run loop. The points, in the order a conversation meets them:

    - ``opened``: the conversation object is made (e.g. learn what earlier runs recorded);
    - ``system_prompt`` / ``conversation_started``: the first event is made, then stored;
    - ``screen_message`` / ``shape_message``: a user message, before and as it is stored;
    - ``run_started``: a run (not a confirmation) begins;
    - ``before_model_call``: before each model call, a step's or a summary's;
    - ``before_request`` / ``after_refusal``: around the request a step sends;
    - ``screen_calls`` / ``after_call`` / ``after_batch``: around the calls a response made;
    - ``at_stop``: the agent ends its turn.
    """

    def opened(self, scope: RunScope) -> None:
        """The conversation object is made, before any run."""

    def system_prompt(self, scope: RunScope, event: SystemPromptEvent) -> SystemPromptEvent:
        """The conversation's first event, before it is stored: what it should hold."""
        return event

    def conversation_started(self, scope: RunScope) -> None:
        """The first event is stored (e.g. record what the conversation starts from)."""

    def screen_message(self, scope: RunScope, text: str) -> list[Event]:
        """A user message before anything is stored: the events to store after it; raise a
        ``ConversationError`` to refuse it (nothing is stored then)."""
        return []

    def shape_message(self, scope: RunScope, message: MessageEvent) -> MessageEvent:
        """A user message as it is stored: what it should hold."""
        return message

    def run_started(self, scope: RunScope) -> None:
        """A run begins (a confirmation is not one)."""

    def before_model_call(self, scope: RunScope) -> str | None:
        """Why the next model call may not be made (the run pauses with this reason), else
        None."""
        return None

    def before_request(self, scope: RunScope) -> None:
        """Before a step's request is projected (e.g. append a condensation)."""

    def after_refusal(
        self, scope: RunScope, error: ContextWindowExceeded, retried: bool
    ) -> Literal[True] | str | None:
        """The provider refused the request as too long (``retried``: already once in this
        step): ``MADE_ROOM`` when the extension shrank the next request (it is made again),
        a reason when it cannot, None when it has no part in it."""
        return None

    def screen_calls(self, scope: RunScope, screened: Screened) -> Screened:
        """A response's calls, before confirmation and before any runs: block some (answered
        by their rejections), or ask for the user's confirmation."""
        return screened

    def after_call(self, scope: RunScope, action: ActionEvent, result: CallResult) -> CallResult:
        """A call's result before it is stored: what it should hold."""
        return result

    def after_batch(self, scope: RunScope, actions: Sequence[ActionEvent]) -> None:
        """Every call of a batch is answered (``actions``: the calls that were to run)."""

    def at_stop(self, scope: RunScope, last_message: str) -> MessageEvent | None:
        """The agent ends its turn: a message that keeps it going, else None."""
        return None
