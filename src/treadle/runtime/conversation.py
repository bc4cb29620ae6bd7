"""A conversation: the state machine that drives an agent over a stored event log.

Owns the run loop, the statuses of RUN, confirmation, pause, interrupt (the calls in progress
stopped now, closed with an error marked ``interrupted: "user"``, then PAUSED), crash recovery
(calls left open by a kill are closed before the model is asked again), fork and branch
switching. Where events go (the store, chained onto the head, callbacks told after) is
``runtime/log.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from treadle.api.isolation import ISOLATION_KEY
from treadle.api.mcp import MCP_SERVERS_KEY
from treadle.api.settings import ModelChoice
from treadle.api.transcript import TranscriptPage
from treadle.errors import TreadleError
from treadle.events.fact_keys import CALL_IDS_KEY as CALL_IDS_KEY
from treadle.events.fact_keys import MODEL_ERROR_KEY as MODEL_ERROR_KEY
from treadle.events.links import pending_actions
from treadle.events.model import (
    ROOT,
    ActionEvent,
    AgentErrorEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    UserRejectionEvent,
)
from treadle.events.projection_cache import IncrementalProjection
from treadle.runtime import settings_changes
from treadle.runtime.agent import (
    InterruptedBy,
    duplicate_call_error,
    interrupted_error,
    unique_call_ids,
)
from treadle.runtime.budget import Budget
from treadle.runtime.condense.condenser import Condenser
from treadle.runtime.condense.context import ContextView
from treadle.runtime.confirmation import (
    ConfirmationPolicy,
    ToolHintRiskAnalyzer,
    needs_confirmation,
)
from treadle.runtime.errors import (
    ConversationBusy,
    ConversationError,
    ForkNeedsWorkspace,
    NothingPending,
    NotPending,
    NotRunnable,
    NotWaiting,
)
from treadle.runtime.extensions import RunScope
from treadle.runtime.extensions.chain import RunExtensions, run_extensions
from treadle.runtime.extensions.condensation import CondensationExtension
from treadle.runtime.forking import record_fork
from treadle.runtime.hooks import ConversationHooks, PromptBlocked
from treadle.runtime.interrupts import (
    Abandoned,
    CallThread,
    InterruptWatcher,
    result_unless_interrupted,
)
from treadle.runtime.llm.base import (
    ContextWindowExceeded,
    LanguageModel,
    ModelError,
    ModelResponse,
)
from treadle.runtime.log import ConversationLog, EventCallback
from treadle.runtime.parts import ConversationParts, build_parts
from treadle.runtime.requests import (
    USER_INTERRUPT,
    USER_PAUSE,
    PauseKind,
    PauseRequest,
    pause_request_event,
    queued_message_event,
    undelivered_messages,
)
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import (
    SETTINGS_KEY,
    ConversationSettings,
    SandboxSettings,
    SettingsPolicy,
)
from treadle.runtime.skills import WorkspaceSkills
from treadle.runtime.snapshots import (
    NoSnapshot,
    RestoreResult,
    recover,
    restore,
)
from treadle.runtime.snapshots.putting_back import (
    covering_or_refuse,
    restore_event,
    restore_recorded,
    snapshots_or_refuse,
)
from treadle.runtime.states import Op, Outcome, decide, status_after_head_move
from treadle.runtime.status import ConversationStatus
from treadle.runtime.stuck import is_stuck
from treadle.runtime.text import storable_text
from treadle.runtime.tools import ToolContext
from treadle.runtime.transcript import transcript_page
from treadle.runtime.workspace.local import LocalWorkspace
from treadle.store.base import EventStore, StoreError, StoreUnavailable

__all__ = [
    "CALL_IDS_KEY",
    "ISOLATION_KEY",
    "MODEL_ERROR_KEY",
    "USER_PAUSE",
    "Conversation",
    "ConversationBusy",
    "ConversationError",
    "EventCallback",
    "NotPending",
    "NotWaiting",
    "NothingPending",
]

logger = logging.getLogger(__name__)

AWAITING_ANSWER = "calls wait for confirmation: confirm or reject them to continue"
"""The reason of a run that asked nothing: calls on the path wait for the user's answer."""
NOT_STARTED_BY_STOP = (
    "This call was not run: the run stopped before it started ({why}). Make it again if it "
    "is still needed."
)
STORE_RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)
"""How long a failed run keeps trying to record its ERROR while its store is unavailable."""

Status = ConversationStatus
_T = TypeVar("_T")


class Conversation:
    """Drives an agent over a stored conversation. Made by ``create`` (a new conversation) or
    ``open`` (a stored one); the constructor only wires parts those two have built."""

    def __init__(
        self, log: ConversationLog, parts: ConversationParts, *, owns_parts: bool = True
    ) -> None:
        """Drive ``parts`` over ``log``; ``owns_parts``: whether ``close`` closes them (False
        for parts the caller built, or a parent's a fork shares: whoever builds closes)."""
        self._log = log
        self.parts = parts
        self._isolation_override = parts.isolation_override
        self.store = log.store
        self.id = log.id
        self.agent = parts.agent
        workspace = self.workspace = parts.workspace
        self.confirmation = ConfirmationPolicy(parts.confirmation)
        self.risk_analyzer = parts.risk_analyzer or ToolHintRiskAnalyzer()
        self.snapshots = parts.snapshots
        """The workspace's snapshots (None: off in the settings, or no place for them)."""
        self._policy = parts.policy
        self.secrets = parts.secrets
        self.context = ToolContext(
            workspace=workspace, secrets=self.secrets, conversation_id=self.id
        )
        self._pause_requested = PauseRequest(self.store, self.id, log.last_seq())
        self._queue_seen = -1
        """The seq up to which queued messages were delivered (see deliver_queued_messages)."""
        self._run_lock = threading.Lock()
        self._status, self.status_reason = log.read_status()
        # The projection of the active path, extended as it grows: a step costs O(new events).
        self._projection = IncrementalProjection()
        # What the model's context holds, followed as the path grows (condensation, turns).
        self._context = ContextView()
        self.hooks = parts.hooks if parts.hooks is not None else ConversationHooks.none()
        """The hooks run at the points of the loop (docs/hooks.md)."""
        self.hooks.attach(self.id, self.context.interruption)
        self.skills = (
            parts.skills if parts.skills is not None else WorkspaceSkills.load(workspace.root)
        )
        """The workspace's skills; what they add is recorded on the events (docs/skills.md)."""
        self._model_calls = CallThread(f"treadle-model-{self.id[:8]}")
        """Where the model is asked (a thread, so that an interrupt need not wait for it)."""
        self._in_flight: set[str] = set()
        """The ids of the calls this run is running (or is about to): the only ones a failure
        or a stop closes; a call waiting for confirmation is never among them."""
        self._owns_parts = owns_parts
        scope = RunScope(log, self._context, self._in_model_thread)
        self._extensions = RunExtensions(run_extensions(parts, self.hooks, self.skills), scope)
        """The capabilities the loop calls at its points (runtime/extensions/)."""
        self._extensions.opened()

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        store: EventStore,
        settings: ConversationSettings,
        *,
        id: str | None = None,
        title: str | None = None,
        model: LanguageModel | None = None,
        secrets: Secrets | None = None,
        callbacks: Sequence[EventCallback] = (),
        policy: SettingsPolicy | None = None,
        model_key: str | None = None,
        parts: ConversationParts | None = None,
    ) -> Conversation:
        """A new conversation whose settings are stored with it; ``ConversationExists`` when
        ``id`` is taken (``open`` reopens). ``policy``: what the settings may reach (a
        server's limits). ``model_key``: this process's model key (the caller reads it from
        its environment), masked wherever it shows up and never given to a tool. ``parts``:
        run these (the caller built them and closes them) instead of building them from
        ``settings`` with ``model``, ``secrets``, ``policy`` and ``model_key``."""
        given = parts is not None
        if parts is None:
            parts = build_parts(
                store, settings, model=model, secrets=secrets, policy=policy, model_key=model_key
            )
        try:
            info = store.create_conversation(
                id, title=title, metadata={SETTINGS_KEY: settings.to_metadata()}
            )
        except BaseException:
            if not given:
                parts.close()  # no conversation will own them
            raise
        return cls._wired(ConversationLog(store, info.id, callbacks), parts, owns=not given)

    @classmethod
    def open(
        cls,
        store: EventStore,
        conversation_id: str,
        *,
        model: LanguageModel | None = None,
        secrets: Secrets | None = None,
        callbacks: Sequence[EventCallback] = (),
        policy: SettingsPolicy | None = None,
        model_key: str | None = None,
        settings_if_missing: ConversationSettings | None = None,
        sandbox: SandboxSettings | None = None,
        parts: ConversationParts | None = None,
    ) -> Conversation:
        """Reopen a stored conversation in this process from its stored settings
        (``ConversationNotFound`` when there is none; arguments as in ``create``). A
        conversation without settings (e.g. imported) runs with ``settings_if_missing``
        (``NotRunnable`` without them); storing them with it is the caller's, e.g. under the
        run lease it holds, so that a refused run leaves the conversation as it was.
        ``sandbox``: run under this sandbox instead of the stored settings' one, the user's
        explicit choice (e.g. ``treadle run --sandbox none``), recorded with each run.
        ``parts``: run these (the caller's to close) instead of building them."""
        info = store.get_conversation(conversation_id)
        if parts is not None:
            return cls._wired(ConversationLog(store, info.id, callbacks), parts, owns=False)
        settings = ConversationSettings.from_metadata(info.metadata) or settings_if_missing
        if settings is None:
            raise NotRunnable(
                f"conversation {conversation_id!r} has no runtime settings (was it imported?): "
                "give it settings to continue it"
            )
        built = build_parts(
            store,
            settings,
            model=model,
            secrets=secrets,
            policy=policy,
            model_key=model_key,
            sandbox=sandbox,
        )
        return cls._wired(ConversationLog(store, info.id, callbacks), built, owns=True)

    @classmethod
    def _wired(cls, log: ConversationLog, parts: ConversationParts, *, owns: bool) -> Conversation:
        if parts.snapshots is not None:
            # A restore a killed process left unfinished is finished (or rolled back) first.
            recover(parts.snapshots.objects, parts.snapshots.root, log.store)
        try:
            return cls(log, parts, owns_parts=owns)
        except BaseException:
            if owns:
                parts.close()
            raise

    def close(self) -> None:
        """Release the tools' processes (terminal sessions, MCP connections) and the model
        calls' thread (a run ends it too)."""
        self._model_calls.close()
        if self._owns_parts:
            self.parts.close()

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------

    @property
    def isolation_override(self) -> str | None:
        """Why this object's tools run under other isolation than the stored settings'."""
        return self._isolation_override

    @property
    def status(self) -> ConversationStatus:
        return self._status

    def stored_status(self) -> tuple[ConversationStatus, str | None]:
        """The status the log records now (another process may have moved it on)."""
        return self._log.read_status()

    @property
    def head(self) -> str | None:
        return self._log.head

    @property
    def condenser(self) -> Condenser | None:
        """What shrinks this conversation's requests (with the window it has learned), None
        when condensation is off."""
        extension = self._extensions.find(CondensationExtension)
        return extension.condenser if extension is not None else None

    @property
    def callbacks(self) -> list[EventCallback]:
        """Told of each event after it is stored (a list: add or remove callbacks freely)."""
        return self._log.callbacks

    def active_path(self, limit: int | None = None) -> list[Event]:
        """The events root..head (TREE-PATH); with ``limit`` only the last ``limit``."""
        path = self._log.path()
        return path[-limit:] if limit else list(path)

    def pending_actions(self) -> list[ActionEvent]:
        return pending_actions(self._log.path())

    def model_responses(self) -> int:
        """The model responses on the active path (forgotten ones included): how many model
        calls made it so far, e.g. to share one step budget across runs and confirmations."""
        self._context.follow(self._log.path())
        return self._context.model_responses

    def messages(self) -> list[dict[str, Any]]:
        """What the model would be sent now (PROJECT-*)."""
        return self._projection.project(self._log.path())

    def transcript(
        self, head: str | None = None, *, before_seq: int | None = None, limit: int = 200
    ) -> TranscriptPage:
        """The newest ``limit`` transcript items of the path to ``head`` (default: the head),
        typed (``api.transcript``), as the server's ``GET .../transcript`` serves them; pass
        ``next_before_seq`` as ``before_seq`` for older ones."""
        return transcript_page(self.store, self.id, head, before_seq, limit)

    # -- user intents ----------------------------------------------------------------------

    def start(self) -> None:
        """Store the conversation's first event, its system prompt, when it has none yet (a
        message or a run does it first anyway)."""
        with self._log.lock:
            self._ensure_system_prompt()

    def send_message(self, text: str) -> MessageEvent:
        return self._store_message(MessageEvent(source="user", text=text))

    def queue_message(self, text: str) -> MessageEvent:
        """Record a user message for a run in progress (here or in another process): the
        run's holder stores it, with this event's id, at its next safe point, after the results
        of the calls in flight, never between a call and its result."""
        message = MessageEvent(source="user", text=text)
        self._log.append_side(queued_message_event(self.head or ROOT, message))
        return message

    def deliver_queued_messages(self) -> list[MessageEvent]:
        """Store the queued messages not stored yet, in the order they were sent. Only the
        holder of the run calls this, at a safe point (no call of its own in flight)."""
        with self._log.lock:
            messages, self._queue_seen = undelivered_messages(self.store, self.id, self._queue_seen)
            stored = []
            for message in messages:
                try:
                    self._store_message(message)
                    stored.append(message)
                except PromptBlocked:  # the hook's run and decision are recorded
                    continue
        return stored

    def _store_message(self, message: MessageEvent) -> MessageEvent:
        # Screened first (e.g. a hook's ``PromptBlocked``: nothing stored).
        following = self._extensions.screen_message(message.text)
        with self._log.lock:
            self._ensure_system_prompt()
            (event,) = self._log.append([self._extensions.shape_message(message)])
            if following:
                self._log.append(following)
            # The log's status, not this object's: another process may have moved it on.
            status = self._log.read_status()[0]
            after = decide(Op.MESSAGE, status, False).status
            if after is not None and after is not status:
                self._set_status(after, "new user message")
        return event  # type: ignore[return-value]  # append gives back each event's kind

    def run(self, max_steps: int = 50) -> ConversationStatus:
        """Ask the model and run its calls until the agent ends its turn, waits for a
        confirmation, is paused, errs, is stuck, or ``max_steps`` model calls were made."""
        with self._running():
            return self._ending_cleanly(self._run, max_steps)

    def _run(self, max_steps: int) -> ConversationStatus:
        status, reason = self._log.read_status()
        rule = decide(Op.RUN, status, bool(self.pending_actions()))
        if rule.outcome is Outcome.ANSWER_FIRST:  # nothing is asked: the calls need an answer
            self._status, self.status_reason = status, reason
            if status is not Status.WAITING_FOR_CONFIRMATION:
                return self._set_status(Status.WAITING_FOR_CONFIRMATION, AWAITING_ANSWER)
            return status
        if rule.outcome is Outcome.RECOVER:  # a run that died left them: they may have run
            self._close_open_calls("crash")
        self._record_isolation()
        self._pause_requested.watch_from(self._log.last_seq())
        self._pause_requested.forget_interrupt()
        self.context.interruption.clear()
        self._extensions.run_started()
        self._in_flight.clear()
        self._set_status(Status.RUNNING)
        with self._interrupt_watcher(), self._model_calls:  # the run's threads end with it
            return self._steps(max_steps)

    def _steps(self, max_steps: int) -> ConversationStatus:
        for _ in range(max_steps):
            self.deliver_queued_messages()  # every call so far has its result
            if self._pause_requested.check():  # the log read once per step
                return self._record_pause()
            outcome = self._step()
            if outcome is not None:
                return outcome
        self._set_status(Status.IDLE, f"stopped after {max_steps} steps; run again to go on")
        return self._status

    def pause(
        self, kind: PauseKind = "pause", *, local_only: bool = False, reason: str = USER_PAUSE
    ) -> None:
        """Stop at the next safe point: between steps, or before the next call of a batch.
        While this object runs, the request is also recorded in the log (``request_pause``),
        unless ``local_only`` (the stop is this process's own: it lost the run, or it stops).
        ``reason`` is the pause's recorded reason (default: the user asked for it). A
        ``local_only`` stop when nothing runs here records nothing: the run it meant has ended
        (e.g. finished), and its status must stay what that run left."""
        if self._run_lock.acquire(blocking=False):  # not running here: the table says
            try:
                if not local_only:
                    self._pause_requested.set(reason)
                    self._pause_now(Op.INTERRUPT if kind == "interrupt" else Op.PAUSE)
            finally:
                self._run_lock.release()
            return
        self._pause_requested.set(reason)
        if not local_only:
            self.request_pause(kind)

    def _pause_now(self, op: Op) -> None:
        """A pause (or interrupt) while nothing runs here; the caller holds the run (e.g. its
        lease): calls a dead run left open are closed as crashes, calls waiting for an answer
        stay pending and confirmable (docs/contracts.md, the state machine)."""
        status, _reason = self._log.read_status()
        rule = decide(op, status, bool(self.pending_actions()))
        if rule.outcome is Outcome.RECOVER_THEN_PAUSE:
            self._close_open_calls("crash")
        self._record_pause()

    def interrupt(self) -> None:
        """Stop the calls in progress now (a command and what it started are killed), close
        each with an error marked ``interrupted: "user"``, and pause. When nothing runs here,
        the request is recorded in the log: the process that runs the conversation (another
        one) notices it within ``WATCH_INTERVAL_S``; when nothing runs at all, it pauses now."""
        if self._run_lock.acquire(blocking=False):  # nothing runs in this process
            try:
                self.request_pause("interrupt")
            finally:
                self._run_lock.release()
            return
        self.request_pause("interrupt")  # the user's request, on record
        self._interrupt_now()

    def _interrupt_now(self) -> None:
        """Make the run in this process stop its calls: no further call starts, and each
        tool stops its calls in progress (``Tool.interrupt``)."""
        self._pause_requested.set(USER_INTERRUPT, "interrupt")
        self.context.interruption.set()
        self.agent.tools.interrupt(self.context)

    def _interrupt_watcher(self) -> InterruptWatcher:
        """While a run or confirmation runs here, notice an interrupt recorded by any process."""
        return InterruptWatcher(
            self._pause_requested.interrupt_requested,
            self._interrupt_now,
            name=f"treadle-interrupt-watch-{self.id[:8]}",
        )

    def request_pause(self, kind: PauseKind = "pause") -> None:
        """Record that the user asked the run in progress to pause: whichever process holds
        the run stops at its next safe point (see ``PauseRequest``)."""
        self._log.append_side(pause_request_event(self.head or ROOT, kind))

    def check_pending(self, action_ids: Sequence[str] | None = None) -> list[ActionEvent]:
        """The calls a confirm or a reject of ``action_ids`` (default: all) would answer, when
        the log says they wait for confirmation: ``NothingPending``, ``NotWaiting`` (a run,
        maybe in another process, is running them) or ``NotPending`` otherwise. A caller that
        serves other processes checks this holding the run lease."""
        return self._choose_pending(action_ids)

    def confirm(self, action_ids: Sequence[str] | None = None) -> ConversationStatus:
        """Run the pending calls the user confirmed (all of them by default); the others stay
        pending. ``NotWaiting`` while the log says a run is running them."""
        with self._running():
            chosen = self._choose_pending(action_ids)
            return self._ending_cleanly(self._confirm, chosen)

    def _confirm(self, chosen: Sequence[ActionEvent]) -> ConversationStatus:
        self._record_isolation()
        self._pause_requested.watch_from(self._log.last_seq())
        self._pause_requested.forget_interrupt()
        self.context.interruption.clear()
        self._in_flight = {action.id for action in chosen}
        self._set_status(Status.RUNNING, "confirmed by the user")
        with self._interrupt_watcher():
            outcome = self._execute(chosen)
        return outcome or self._after_user_decision()

    def reject(
        self, action_ids: Sequence[str] | None = None, reason: str = "User rejected the action"
    ) -> ConversationStatus:
        """Answer the pending calls the user refused with user-rejection events."""
        with self._running():
            chosen = self._choose_pending(action_ids)
            return self._ending_cleanly(self._reject, chosen, reason)

    def _reject(self, chosen: Sequence[ActionEvent], reason: str) -> ConversationStatus:
        for action in chosen:
            self._log.append(
                [
                    UserRejectionEvent(
                        action_id=action.id,
                        tool_call_id=action.tool_call_id,
                        tool_name=action.tool_name,
                        reason=reason,
                    )
                ]
            )
        return self._after_user_decision()

    def switch_branch(self, event_id: str, *, restore_files: bool = False) -> RestoreResult | None:
        """Make ``event_id`` the head: the model's context becomes that branch. The workspace's
        files are NOT rolled back (BRANCH: a branch of events is not a file snapshot) unless
        ``restore_files``: then they are put back to the snapshot covering ``event_id``
        (``NoSnapshot``, and nothing changed, when none does)."""
        with self._running(), self._log.lock:
            restored = None
            if restore_files:
                snapshots = snapshots_or_refuse(self.snapshots, self.id)
                restored = restore_event(snapshots, self._log, event_id)
            self._log.move_head(event_id)
            status, why = status_after_head_move(bool(self.pending_actions()))
            self._set_status(status, f"switched to the branch of {event_id}" + (why and f": {why}"))
        return restored

    def restore_snapshot(self, snapshot_id: str) -> RestoreResult:
        """Put back any snapshot recorded in this conversation (the undo of a restore: the
        files it replaced are the snapshot it took first). The head does not move."""
        with self._running(), self._log.lock:
            snapshots = snapshots_or_refuse(self.snapshots, self.id)
            return restore_recorded(snapshots, self._log, snapshot_id)

    def fork(
        self,
        event_id: str | None = None,
        *,
        title: str | None = None,
        restore_files: bool = False,
        workspace: str | None = None,
    ) -> Conversation:
        """A new conversation holding this one's path up to ``event_id`` (default: the head)
        and its snapshots. Without ``workspace`` it shares this agent and workspace (files
        are not copied, see ``switch_branch``); with one, it works there (created if
        missing), and ``restore_files`` fills it from the snapshot covering the fork's event
        (``NoSnapshot`` before anything is created when none does)."""
        head = event_id or self.head
        if restore_files and workspace is None:
            raise ForkNeedsWorkspace(
                "a fork that restores files needs a workspace of its own (a fork shares its "
                "parent's workspace otherwise, whose files would change under it): give one"
            )
        covering = None
        if restore_files:
            snapshots = snapshots_or_refuse(self.snapshots, self.id)
            covering = covering_or_refuse(snapshots, self.store, self.id, head)
        root = None
        if workspace is not None:  # refused here, before a conversation exists, if outside
            root = LocalWorkspace(
                workspace, create=True, within=self._policy.allows.workspace_root
            ).root
        child_id = record_fork(
            self.store, self.id, head, title=title, workspace=root, snapshots=self.snapshots
        )
        if workspace is None:
            # The parent's parts (its tools: the parent closes them), hooks of its own.
            shared_parts = self.parts.replace(hooks=self.hooks.copied())
            log = ConversationLog(self.store, child_id, self.callbacks)
            return Conversation(log, shared_parts, owns_parts=False)
        forked = Conversation.open(
            self.store,
            child_id,
            model=self.agent.model,
            secrets=self.secrets,
            callbacks=self.callbacks,
            policy=self._policy,
        )
        if covering is not None:
            if forked.snapshots is None:
                forked.close()
                raise NoSnapshot(f"snapshots are off for the fork {child_id}: nothing restored")
            with forked._log.lock:
                git_tree = covering.git_tree
                restore(forked.snapshots, forked._log, covering.id, event=head, git_target=git_tree)
        return forked

    # -- the loop --------------------------------------------------------------------------

    def _step(self) -> ConversationStatus | None:
        """One model call and its consequences; a status when the run must stop."""
        self._ensure_system_prompt()
        response = self._model_response()
        if isinstance(response, ConversationStatus):
            return response
        events = self._response_events(response)
        if isinstance(events, ConversationStatus):
            return events
        if not response.tool_calls:
            self._log.append(events)
            if self._kept_going(response.text):
                return None
            return self._set_status(Status.FINISHED, "the agent answered and awaits the user")
        # Screened before confirmation and before any runs: a blocked call is answered now;
        # "ask" waits for the user, and nothing lets a call skip the confirmation the policy
        # asks for.
        screened = self._extensions.screen_calls(self._stored_calls(response, events))
        if screened.rejections:
            self._log.append(screened.rejections)
        actions = screened.allowed
        if not actions:
            return None  # every call blocked: the model is told why at the next step
        if screened.ask or needs_confirmation(
            self.confirmation, actions, self.agent.tools, self.risk_analyzer
        ):
            # A pause asked while the model answered is honoured: paused, the calls kept
            # pending and confirmable (docs/contracts.md, the state machine).
            if self._pause_requested.check():
                return self._record_pause()
            return self._set_status(Status.WAITING_FOR_CONFIRMATION)
        self._in_flight = {action.id for action in actions}
        return self._execute(actions)

    def _model_response(self) -> ModelResponse | ConversationStatus:
        """The model's answer to the next request, or the status the run stops with: a
        budget reached, an error, an interrupt, or a refusal as too long that no extension
        could make room for (room is made once per step: a second refusal ends the run)."""
        retried = False
        while True:
            # Before each model call: this one, and a condensation's summary call.
            if (why := self._extensions.before_model_call()) is not None:
                return self._pause_for(why)
            head = self.head
            try:
                self._extensions.before_request()
                if self.head != head and (why := self._extensions.before_model_call()):
                    return self._pause_for(why)  # a summary call was just made
                return self._ask(self.messages())
            except ContextWindowExceeded as error:
                why = self._extensions.after_refusal(error, retried)
                if why is not None:
                    return self._record_model_error(ModelError(f"{error}; {why}"))
                retried = True
            except ModelError as error:
                return self._record_model_error(error)
            except Abandoned:  # interrupted while the model thought: its answer is not wanted
                return self._record_pause()

    def _response_events(
        self, response: ModelResponse
    ) -> list[MessageEvent] | list[ActionEvent] | ConversationStatus:
        """The events of ``response``, or ERROR when it cannot be turned into events."""
        try:
            return self.agent.response_events(response)
        except ValidationError as error:  # e.g. a field a provider left empty
            problem = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()
            )
            return self._record_model_error(
                ModelError(
                    f"model {self.agent.model.name} sent a response the runtime cannot turn "
                    f"into events: {problem}",
                    raw=repr(response),
                )
            )

    def _stored_calls(
        self, response: ModelResponse, events: list[MessageEvent] | list[ActionEvent]
    ) -> list[ActionEvent]:
        """Store the response's calls; those that may run. PROJECT-DUP-CALL / LINK-UNIQUE are
        checked before anything is stored or run: a repeated call id is renamed (recorded as
        a ``call_ids`` fact), a repeated call answered by an error and not run."""
        # With tool calls, every event of the response is an action (agent.response_events).
        checked = unique_call_ids(events, self._used_call_ids())  # type: ignore[arg-type]
        stored: list[ActionEvent] = self._log.append(checked.actions)  # type: ignore[assignment]
        if checked.renamed:
            self._log.record_fact(
                CALL_IDS_KEY, {"llm_response_id": response.id, "renamed": checked.renamed}
            )
        not_run = {action.id for action in checked.not_run}
        originals = {item["action_id"]: item["original"] for item in checked.renamed}
        for action in stored:
            if action.id in not_run:
                self._log.append([duplicate_call_error(action, originals[action.id])])
        return [action for action in stored if action.id not in not_run]

    def _kept_going(self, last_message: str) -> bool:
        """As the agent ends its turn: True when an extension keeps it going (e.g. a Stop
        hook, its reason stored as a message for the model)."""
        message = self._extensions.at_stop(last_message)
        if message is None:
            return False
        self._log.append([message])
        return True

    def _ask(self, messages: list[dict[str, Any]]) -> ModelResponse:
        """The model's answer, asked in the model-call thread so that an interrupt need not
        wait for it: ``Abandoned`` then (the call ends alone; its answer and cost are dropped)."""
        self._context.follow(self._log.path())
        responses_before = self._context.model_responses
        return self._in_model_thread(
            lambda: self.agent.ask(messages, responses_before=responses_before)
        )

    def _in_model_thread(self, call: Callable[[], _T]) -> _T:
        """``call`` (a model call: a step's, or a summary's) in the model-call thread;
        ``Abandoned`` when the run is interrupted, before it starts or while it runs."""
        if self.context.interruption.is_set():
            raise Abandoned()  # an interrupt already made wins over any answer
        future = self._model_calls.submit(call)
        return result_unless_interrupted(future, self.context.interruption, grace_s=0)

    # -- budgets ---------------------------------------------------------------------------

    def _pause_for(self, reason: str) -> ConversationStatus:
        # Paused by the runtime, not the user (e.g. a budget reached): the reason says why.
        self._log.append([PauseEvent(source="environment")])
        return self._set_status(Status.PAUSED, reason)

    def raise_budget(self, budget: Budget) -> dict[str, Any]:
        """Raise this conversation's budgets to those ``budget`` gives (None: kept), stored
        in its settings and recorded in its log (``runtime/settings_changes.py``); the
        changes made. ``BudgetLowered`` when one would go down. Not while a run is in
        progress."""
        with self._running(), self._log.lock:
            return settings_changes.raise_budget(self._log, budget)

    def change_model(self, choice: ModelChoice) -> dict[str, Any] | None:
        """Store ``choice`` as this conversation's model from now on and record it; the
        fact's value, None when it is the stored model already. The caller runs this object
        with that model (given to ``open``) and holds the run lease. Not while a run is in
        progress."""
        with self._running(), self._log.lock:
            return settings_changes.change_model(self._log, choice)

    def _used_call_ids(self) -> set[str]:
        """The call ids on the active path, followed as it grows (not a pass over it)."""
        self._context.follow(self._log.path())
        return self._context.call_ids

    def _record_model_error(self, error: ModelError) -> ConversationStatus:
        """A model that could not answer, or answered unusably: ERROR, raw response kept."""
        message = self.secrets.mask(storable_text(str(error)))
        if error.raw is not None:
            raw = self.secrets.mask(storable_text(error.raw))
            self._log.record_fact(MODEL_ERROR_KEY, {"error": message, "raw_response": raw})
        return self._set_status(Status.ERROR, message)

    # -- ending a run that failed or was stopped ---------------------------------------------

    def _ending_cleanly(
        self, operation: Callable[..., ConversationStatus], *args: object
    ) -> ConversationStatus:
        """Run ``operation``; whatever it raises, open calls are closed and the log says how
        the run ended (ERROR with the cause, or PAUSED for an interrupt): never "running"."""
        try:
            return operation(*args)
        except KeyboardInterrupt as stop:  # Ctrl-C, or a signal the caller turned into one
            self._record_stop(str(stop) or "an interrupt")
            raise
        except Exception as error:
            return self._record_failure(error)

    def _record_failure(self, error: Exception) -> ConversationStatus:
        """ERROR with the cause; while the store is unavailable, tried again for a while
        (STORE_RETRY_DELAYS_S). When even that fails, ``error`` propagates to the caller."""
        cause = self.secrets.mask(storable_text(_failure_text(error)))
        # A traceback only for what is not ours to explain (a bug); the rest is the cause.
        bug = not isinstance(error, TreadleError)
        logger.warning("the run of conversation %s failed: %s", self.id, cause, exc_info=bug)
        delays = iter(STORE_RETRY_DELAYS_S)
        while True:
            try:
                self._close_in_flight(None, f"The run failed before this call returned: {cause}")
                return self._set_status(Status.ERROR, cause)
            except StoreUnavailable:
                delay = next(delays, None)
                if delay is None:
                    raise error from None
                time.sleep(delay)
            except Exception:
                raise error from None

    def _record_stop(self, why: str) -> None:
        """An interrupted run (Ctrl-C, SIGTERM): open calls closed as interrupted by the user
        (a command in progress was stopped with what it started, ``BashSession.run``), the stop
        recorded (PAUSED, with the reason)."""
        try:
            self._close_in_flight("user")
            self._log.append([PauseEvent()])
            self._set_status(Status.PAUSED, f"stopped by {why}; run again to continue")
        except Exception:  # the store cannot take it: the interrupt still ends the run
            logger.exception("could not record the stop of conversation %s", self.id)

    def _close_in_flight(self, by: InterruptedBy | None, reason: str | None = None) -> None:
        """Close the calls this run was running (a failure, a stop): those waiting for the
        user's answer stay pending (docs/contracts.md, the state machine)."""
        self._close_open_calls(by, reason, only=self._in_flight)
        self._in_flight = set()

    def _close_open_calls(
        self, by: InterruptedBy | None, reason: str | None = None, *, only: set[str] | None = None
    ) -> None:
        """Answer every call without a result (``only``: of these ids) with an agent error,
        so the projection stays valid: interrupted ``by`` the user or a crash, or (None) with
        ``reason`` as its text."""
        for action in self.pending_actions():
            if only is not None and action.id not in only:
                continue
            event = interrupted_error(action, by or "crash")
            if by is None:
                event = event.model_copy(
                    update={"error": reason or event.error, "interrupted": None}
                )
            self._log.append([event])

    def _execute(self, actions: Sequence[ActionEvent]) -> ConversationStatus | None:
        ended_turn = False
        failure = None
        answered: set[str] = set()
        by_call = {action.tool_call_id: action for action in actions}
        interruption = self.context.interruption
        for outcome in self.agent.run_calls(
            actions, self.context, should_start=lambda: not self._pause_requested.is_set()
        ):
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
                event = self._extensions.after_call(by_call[event.tool_call_id], event)
            self._log.append([event])
            answered.add(event.tool_call_id)
        for action in actions:
            if action.tool_call_id not in answered:  # paused before it started: close it
                self._log.append([self._not_started(action)])
        self._in_flight = set()
        self._extensions.after_batch(actions)  # every call answered
        if failure:
            return self._set_status(Status.ERROR, failure)
        if ended_turn and not self._kept_going(_finish_message(actions)):
            return self._set_status(Status.FINISHED, "the agent called finish")
        if is_stuck(self._log.path()):
            return self._set_status(Status.STUCK, "the same calls gave the same results 3 times")
        if self._pause_requested.is_set():
            return self._record_pause()
        return None

    def _not_started(self, action: ActionEvent) -> AgentErrorEvent:
        """The answer to a call a pause kept from starting: never a crash (it never ran)."""
        if self._pause_requested.by_user():
            return interrupted_error(action, "user", started=False)
        why = self._pause_requested.reason() or "this process stopped its run"
        return AgentErrorEvent(
            tool_call_id=action.tool_call_id,
            tool_name=action.tool_name,
            action_id=action.id,
            error=storable_text(NOT_STARTED_BY_STOP.format(why=why)),
        )

    def _after_user_decision(self) -> ConversationStatus:
        if self.pending_actions():
            return self._set_status(Status.WAITING_FOR_CONFIRMATION)
        if self._status is Status.RUNNING or self._status is Status.WAITING_FOR_CONFIRMATION:
            return self._set_status(Status.IDLE, "every call answered; run to continue")
        return self._status

    def _choose_pending(self, action_ids: Sequence[str] | None) -> list[ActionEvent]:
        pending = self.pending_actions()
        if not pending:
            raise NothingPending()
        status, _reason = self._log.read_status()
        if decide(Op.CONFIRM, status, True).outcome is Outcome.NOT_WAITING:
            raise NotWaiting(status.value)
        if action_ids is None:
            return pending
        by_id = {action.id: action for action in pending}
        unknown = [action_id for action_id in action_ids if action_id not in by_id]
        if unknown:
            raise NotPending(unknown, by_id)
        return [by_id[action_id] for action_id in action_ids]

    def _record_isolation(self) -> None:
        """ISOLATION: what this run's tools run under, recorded before any of them runs, with
        the MCP servers this object connected or failed to (none: no fact)."""
        fact = dict(self.workspace.isolation)
        fact["override"] = self._isolation_override
        self._log.record_fact(ISOLATION_KEY, fact)
        if self.agent.tools.mcp_servers:
            servers = list(self.agent.tools.mcp_servers)
            self._log.record_fact(MCP_SERVERS_KEY, {"servers": servers})

    def _record_pause(self) -> ConversationStatus:
        reason = self._pause_requested.clear()
        self._log.append([PauseEvent()])
        return self._set_status(Status.PAUSED, reason)

    # -- writing ---------------------------------------------------------------------------

    def _ensure_system_prompt(self) -> None:
        if self.head is None:
            prompt = self._extensions.system_prompt(self.agent.system_prompt_event())
            self._log.append([prompt])
            self._extensions.conversation_started()

    def _set_status(
        self, status: ConversationStatus, reason: str | None = None
    ) -> ConversationStatus:
        def remember() -> None:
            self._status, self.status_reason = status, reason

        self._log.record_status(status, reason, then=remember)
        return status

    def _running(self) -> _RunGuard:
        return _RunGuard(self._run_lock, self.id)


def _finish_message(actions: Sequence[ActionEvent]) -> str:
    """What the agent said as it called ``finish`` (a Stop hook's ``last_assistant_message``)."""
    for action in actions:
        if action.tool_name == "finish" and action.arguments is not None:
            return str(action.arguments.get("message", ""))
    return ""


def _failure_text(error: Exception) -> str:
    """The cause of a failed run in one line: our own errors say it; anything else is a bug,
    whose class name helps."""
    if isinstance(error, StoreError):
        return f"the store failed: {error}"
    if isinstance(error, TreadleError):
        return f"the run failed: {error}"
    return f"the run failed: {type(error).__name__}: {error}"


class _RunGuard:
    """Exactly one run/confirm/reject at a time per conversation object."""

    def __init__(self, lock: threading.Lock, conversation_id: str) -> None:
        self._lock = lock
        self._conversation_id = conversation_id

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            raise ConversationBusy(self._conversation_id)

    def __exit__(self, *_exc: object) -> None:
        self._lock.release()
