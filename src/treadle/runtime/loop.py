"""The run loop: a step asks the model, stores its answer and runs its calls.

``RunLoop`` is the core a ``Conversation`` drives: ``step`` is one model call and its
consequences (the response stored, its calls screened by the run extensions, held for the
user's confirmation or run as a batch), and returns the status the run stops with, or None
to go on. What a capability adds happens at the extensions' points (runtime/extensions/);
which operation may run when (run, confirm, pause, ...) is the ``Conversation``'s state
machine (runtime/states.py). ``RunStatus`` is the status as the log records it, shared by
the two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from treadle.data.isolation import ISOLATION_KEY
from treadle.data.mcp import MCP_SERVERS_KEY
from treadle.events.fact_keys import MODEL_ERROR_KEY
from treadle.events.model import ActionEvent, PauseEvent
from treadle.events.projection_cache import IncrementalProjection
from treadle.runtime.agent import InterruptedBy
from treadle.runtime.batch import close_open_calls, finish_message, run_batch
from treadle.runtime.condense.context import ContextView
from treadle.runtime.confirmation import (
    ConfirmationPolicy,
    ToolHintRiskAnalyzer,
    needs_confirmation,
)
from treadle.runtime.extensions import RunExtension, RunScope
from treadle.runtime.extensions.chain import RunExtensions
from treadle.runtime.interrupts import Abandoned, CallThread, InterruptWatcher
from treadle.runtime.llm.base import ContextWindowExceeded, ModelError, ModelResponse
from treadle.runtime.log import ConversationLog
from treadle.runtime.parts import ConversationParts
from treadle.runtime.requests import USER_INTERRUPT, PauseRequest
from treadle.runtime.responses import response_events, store_calls
from treadle.runtime.status import ConversationStatus
from treadle.runtime.stuck import is_stuck
from treadle.runtime.text import storable_text
from treadle.runtime.tools import ToolContext
from treadle.store.base import ConversationInfo

Status = ConversationStatus
T = TypeVar("T")


class RunStatus:
    """A conversation's status and its reason as this process last recorded or read them;
    ``set`` records a new one in the log (and remembers it once stored)."""

    def __init__(self, log: ConversationLog) -> None:
        self._log = log
        self.status, self.reason = log.read_status()

    def set(self, status: ConversationStatus, reason: str | None = None) -> ConversationStatus:
        self._log.record_status(status, reason, then=lambda: self.remember(status, reason))
        return status

    def remember(self, status: ConversationStatus, reason: str | None) -> None:
        self.status, self.reason = status, reason


class RunLoop:
    """The steps of one conversation's runs over its parts (see the module docstring), and
    what they keep between steps: the status, the projection and the context view followed
    as the path grows (a step costs O(new events)), the thread the model is asked in, and the
    extensions. ``in_flight`` holds the ids of the calls a run is running (or is about to):
    the only ones a failure or a stop closes; a call waiting for confirmation is never among
    them."""

    def __init__(
        self,
        log: ConversationLog,
        parts: ConversationParts,
        *,
        context: ToolContext,
        extensions: Sequence[RunExtension],
        pause: PauseRequest,
    ) -> None:
        self._log = log
        self._parts = parts
        self._agent = parts.agent
        self._context = context
        self._pause = pause
        self._confirmation = ConfirmationPolicy(parts.confirmation)
        self._risk_analyzer = parts.risk_analyzer or ToolHintRiskAnalyzer()
        self._secrets = parts.secrets
        self.status = RunStatus(log)
        self.projection = IncrementalProjection()
        self.view = ContextView()
        """What the model's context holds (condensation, turns), followed as the path grows."""
        self.model_calls = CallThread(f"treadle-model-{log.id[:8]}")
        """Where the model is asked (a thread, so that an interrupt need not wait for it)."""
        scope = RunScope(log, self.view, self.in_model_thread)
        self.extensions = RunExtensions(extensions, scope)
        """The capabilities the loop calls at its points (runtime/extensions/)."""
        self.in_flight: set[str] = set()

    def begin(
        self, in_flight: set[str], reason: str | None = None, watch_from: int | None = None
    ) -> None:
        """A run or a confirmation starts: ISOLATION recorded before any tool runs (with the
        MCP servers connected or failed to), pause requests watched from now (from the seq
        ``watch_from``, when given), ``in_flight`` the calls it will run, RUNNING."""
        fact = dict(self._parts.workspace.isolation)
        fact["override"] = self._parts.isolation_override
        # both stored with RUNNING, in its transaction (ride_along)
        self._log.record_fact(ISOLATION_KEY, fact, ride_along=True)
        if self._agent.tools.mcp_servers:
            servers = list(self._agent.tools.mcp_servers)
            self._log.record_fact(MCP_SERVERS_KEY, {"servers": servers}, ride_along=True)
        self._pause.watch_from(self._log.last_seq() if watch_from is None else watch_from)
        self._pause.forget_interrupt()
        self._context.interruption.clear()
        self.in_flight = in_flight
        self.status.set(Status.RUNNING, reason)

    def interrupt_now(self) -> None:
        """Make the run in this process stop its calls: no further call starts, and each
        tool stops its calls in progress (``Tool.interrupt``)."""
        self._pause.set(USER_INTERRUPT, "interrupt")
        self._context.interruption.set()
        self._agent.tools.interrupt(self._context)

    def interrupt_watcher(self) -> InterruptWatcher:
        """While a run or confirmation runs here, notice an interrupt recorded by any process."""
        return InterruptWatcher(
            self._pause.interrupt_requested,
            self.interrupt_now,
            name=f"treadle-interrupt-watch-{self._log.id[:8]}",
            log=(self._log.store, self._log.id),
        )

    def in_model_thread(self, call: Callable[[], T]) -> T:
        """``call`` (a step's model call, or a condensation's summary call) where the model is
        asked; ``Abandoned`` when the run is interrupted, before it starts or while it runs."""
        return self.model_calls.call_unless_interrupted(call, self._context.interruption)

    def ensure_started(self) -> None:
        """Store the system prompt when the conversation has no event yet."""
        if self._log.head is None:
            prompt = self.extensions.system_prompt(self._agent.system_prompt_event())
            self._log.append([prompt])
            self.extensions.conversation_started()

    def step(self, row: ConversationInfo | None = None) -> ConversationStatus | None:
        """One model call and its consequences; a status when the run must stop. ``row``: the
        conversation's row if just read (the step's budget check then reads no other)."""
        self.ensure_started()
        self.extensions.scope.step_row = row
        try:
            response = self._model_response()
        finally:
            self.extensions.scope.step_row = None
        if isinstance(response, ConversationStatus):
            return response
        events = response_events(self._agent, response)
        if isinstance(events, ModelError):
            return self._record_model_error(events)
        if not response.tool_calls:
            self._log.append(events)
            if self._kept_going(response.text):
                return None
            return self.status.set(Status.FINISHED, "the agent answered and awaits the user")
        # Screened before confirmation and before any runs: a blocked call is answered now;
        # "ask" waits for the user, and nothing lets a call skip the confirmation the policy
        # asks for.
        screened = self.extensions.screen_calls(
            # With tool calls, every event of the response is an action (agent.response_events).
            store_calls(self._log, response, events, self._used_call_ids())  # type: ignore[arg-type]
        )
        if screened.rejections:
            self._log.append(screened.rejections)
        actions = screened.allowed
        if not actions:
            return None  # every call blocked: the model is told why at the next step
        if screened.ask or needs_confirmation(
            self._confirmation, actions, self._agent.tools, self._risk_analyzer
        ):
            # A pause asked while the model answered is honoured: paused, the calls kept
            # pending and confirmable (docs/contracts.md, the state machine).
            if self._pause.check():
                return self.record_pause()
            return self.status.set(Status.WAITING_FOR_CONFIRMATION)
        self.in_flight = {action.id for action in actions}
        return self.run_calls(actions)

    def run_calls(self, actions: Sequence[ActionEvent]) -> ConversationStatus | None:
        """Run ``actions`` (runtime/batch.py); a status when the run must stop after them."""
        outcome = run_batch(
            actions,
            agent=self._agent,
            context=self._context,
            log=self._log,
            extensions=self.extensions,
            pause=self._pause,
        )
        self.in_flight = set()
        if outcome.failure:
            return self.status.set(Status.ERROR, outcome.failure)
        if outcome.ended_turn and not self._kept_going(finish_message(actions)):
            return self.status.set(Status.FINISHED, "the agent called finish")
        if is_stuck(self._log.path()):
            return self.status.set(Status.STUCK, "the same calls gave the same results 3 times")
        if self._pause.is_set():
            return self.record_pause()
        return None

    def record_pause(self) -> ConversationStatus:
        """PAUSED, with the reason of the pause request it honours."""
        reason = self._pause.clear()
        self._log.append([PauseEvent()])
        return self.status.set(Status.PAUSED, reason)

    def record_error(self, cause: str) -> ConversationStatus:
        """A failed run: the calls it was running closed with ``cause``, then ERROR."""
        self.close_in_flight(None, f"The run failed before this call returned: {cause}")
        return self.status.set(Status.ERROR, cause)

    def record_stop(self, why: str) -> None:
        """An interrupted run (Ctrl-C, SIGTERM): open calls closed as interrupted by the user
        (a command in progress was stopped with what it started, ``BashSession.run``), the stop
        recorded (PAUSED, with the reason)."""
        self.close_in_flight("user")
        self._log.append([PauseEvent()])
        self.status.set(Status.PAUSED, f"stopped by {why}; run again to continue")

    def close_in_flight(self, by: InterruptedBy | None, reason: str | None = None) -> None:
        """Close the calls this run was running (a failure, a stop): those waiting for the
        user's answer stay pending (docs/contracts.md, the state machine)."""
        close_open_calls(self._log, by, reason, only=self.in_flight)
        self.in_flight = set()

    def _model_response(self) -> ModelResponse | ConversationStatus:
        """The model's answer to the next request, or the status the run stops with: a
        budget reached, an error, an interrupt, or a refusal as too long that no extension
        could make room for (room is made once per step: a second refusal ends the run)."""
        retried = False
        while True:
            # Before each model call: this one, and a condensation's summary call.
            if (why := self.extensions.before_model_call()) is not None:
                return self._pause_for(why)
            head = self._log.head
            try:
                self.extensions.before_request()
                if self._log.head != head and (why := self.extensions.before_model_call()):
                    return self._pause_for(why)  # a summary call was just made
                return self._ask(self.projection.project(self._log.path()))
            except ContextWindowExceeded as error:
                why = self.extensions.after_refusal(error, retried)
                if why is not None:
                    return self._record_model_error(ModelError(f"{error}; {why}"))
                retried = True
            except ModelError as error:
                return self._record_model_error(error)
            except Abandoned:  # interrupted while the model thought: its answer is not wanted
                return self.record_pause()

    def _ask(self, messages: list[dict[str, Any]]) -> ModelResponse:
        """The model's answer, asked in the model-call thread so that an interrupt need not
        wait for it: ``Abandoned`` then (the call ends alone; its answer and cost are dropped)."""
        self.view.follow(self._log.path())
        responses_before = self.view.model_responses
        return self.in_model_thread(
            lambda: self._agent.ask(messages, responses_before=responses_before)
        )

    def _kept_going(self, last_message: str) -> bool:
        """As the agent ends its turn: True when an extension keeps it going (e.g. a Stop
        hook, its reason stored as a message for the model)."""
        message = self.extensions.at_stop(last_message)
        if message is None:
            return False
        self._log.append([message])
        return True

    def _pause_for(self, reason: str) -> ConversationStatus:
        # Paused by the runtime, not the user (e.g. a budget reached): the reason says why.
        self._log.append([PauseEvent(source="environment")])
        return self.status.set(Status.PAUSED, reason)

    def _used_call_ids(self) -> set[str]:
        """The call ids on the active path, followed as it grows (not a pass over it)."""
        self.view.follow(self._log.path())
        return self.view.call_ids

    def _record_model_error(self, error: ModelError) -> ConversationStatus:
        """A model that could not answer, or answered unusably: ERROR, raw response kept."""
        message = self._secrets.mask(storable_text(str(error)))
        if error.raw is not None:
            raw = self._secrets.mask(storable_text(error.raw))
            self._log.record_fact(MODEL_ERROR_KEY, {"error": message, "raw_response": raw})
        return self.status.set(Status.ERROR, message)
