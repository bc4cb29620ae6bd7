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
from collections.abc import Callable, Sequence
from typing import Any

from treadle.data.isolation import ISOLATION_KEY
from treadle.data.settings import ModelChoice
from treadle.data.transcript import TranscriptPage
from treadle.data.views import RestoreView
from treadle.events.fact_keys import CALL_IDS_KEY as CALL_IDS_KEY
from treadle.events.fact_keys import MODEL_ERROR_KEY as MODEL_ERROR_KEY
from treadle.events.links import pending_actions
from treadle.events.model import (
    ROOT,
    ActionEvent,
    Event,
    MessageEvent,
)
from treadle.runtime import settings_changes
from treadle.runtime.batch import close_open_calls
from treadle.runtime.budget import Budget
from treadle.runtime.condense.condenser import Condenser
from treadle.runtime.confirmation import (
    choose_pending,
    rejections,
)
from treadle.runtime.ending import record_failure
from treadle.runtime.errors import (
    ConversationBusy,
    ConversationError,
    NothingPending,
    NotPending,
    NotRunnable,
    NotWaiting,
)
from treadle.runtime.extensions.chain import run_extensions
from treadle.runtime.extensions.condensation import CondensationExtension
from treadle.runtime.forking import fork as fork_conversation
from treadle.runtime.hooks import ConversationHooks, PromptBlocked
from treadle.runtime.live_output import OutputListener
from treadle.runtime.llm.base import (
    LanguageModel,
)
from treadle.runtime.log import ConversationLog, EventCallback
from treadle.runtime.loop import RunLoop
from treadle.runtime.parts import ConversationParts, build_parts
from treadle.runtime.requests import (
    USER_PAUSE,
    PauseKind,
    PauseRequest,
    pause_request_event,
    queued_message_event,
    run_began,
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
from treadle.runtime.snapshots import recover
from treadle.runtime.snapshots.putting_back import (
    restore_event,
    restore_recorded,
    snapshots_or_refuse,
)
from treadle.runtime.states import Op, Outcome, decide, status_after_head_move
from treadle.runtime.status import ConversationStatus
from treadle.runtime.tools import ToolContext
from treadle.runtime.transcript import transcript_page
from treadle.store.base import EventStore

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

Status = ConversationStatus


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
        self.snapshots = parts.snapshots
        """The workspace's snapshots (None: off in the settings, or no place for them)."""
        self.secrets = parts.secrets
        self.context = ToolContext(
            workspace=workspace,
            secrets=self.secrets,
            conversation_id=self.id,
            live_output=parts.live_output,
        )
        self._pause_requested = PauseRequest(self.store, self.id, log.last_seq(), log.written_here)
        self._queue_seen = -1
        """The seq up to which queued messages were delivered (see deliver_queued_messages)."""
        self._run_lock = threading.Lock()
        self.hooks = parts.hooks if parts.hooks is not None else ConversationHooks.none()
        """The hooks run at the points of the loop (docs/hooks.md)."""
        self.hooks.attach(self.id, self.context.interruption)
        self.skills = (
            parts.skills if parts.skills is not None else WorkspaceSkills.load(workspace.root)
        )
        """The workspace's skills; what they add is recorded on the events (docs/skills.md)."""
        self._owns_parts = owns_parts
        extensions = run_extensions(parts, self.hooks, self.skills)
        self._loop = loop = RunLoop(
            log, parts, context=self.context, extensions=extensions, pause=self._pause_requested
        )
        self._status, self._extensions = loop.status, loop.extensions
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
        self._loop.model_calls.close()
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
        return self._status.status

    @property
    def status_reason(self) -> str | None:
        return self._status.reason

    def stored_status(self) -> tuple[ConversationStatus, str | None]:
        """The status the log records now (another process may have moved it on)."""
        return self._log.read_status()

    @property
    def head(self) -> str | None:
        return self._log.head

    @property
    def log(self) -> ConversationLog:
        """Where this conversation's events go (runtime/log.py); the loop's writes go through
        its methods, which keep the state machine."""
        return self._log

    @property
    def condenser(self) -> Condenser | None:
        """What shrinks this conversation's requests (with the window it has learned), None
        when condensation is off."""
        extension = self._extensions.find(CondensationExtension)
        return extension.condenser if extension is not None else None

    @property
    def output_listeners(self) -> list[OutputListener]:
        """Told a running call's output as it comes, in masked chunks; never stored (a list:
        add or remove listeners freely; a fork sharing these parts shares them)."""
        return self.parts.live_output.listeners

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
        self._loop.view.follow(self._log.path())
        return self._loop.view.model_responses

    def messages(self) -> list[dict[str, Any]]:
        """What the model would be sent now (PROJECT-*)."""
        return self._loop.projection.project(self._log.path())

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
            self._loop.ensure_started()

    def send_message(self, text: str) -> MessageEvent:
        return self._store_message(MessageEvent(source="user", text=text))

    def queue_message(self, text: str) -> MessageEvent:
        """Record a user message for a run in progress (here or in another process): the
        run's holder stores it, with this event's id, at its next safe point, after the results
        of the calls in flight, never between a call and its result."""
        message = MessageEvent(source="user", text=text)
        self._log.append_side(queued_message_event(self.head or ROOT, message))
        return message

    def deliver_queued_messages(self, top: int | None = None) -> list[MessageEvent]:
        """Store the queued messages not stored yet, in the order they were sent. Only the
        holder of the run calls this, at a safe point (no call of its own in flight).
        ``top``: the log's last seq if just read (else it is read here)."""
        with self._log.lock:
            messages, self._queue_seen = undelivered_messages(
                self.store, self.id, self._queue_seen, self._log.written_here, top
            )
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
        with self._log.lock, self._log.keeping_head():
            self._loop.ensure_started()
            (event,) = self._log.append([self._extensions.shape_message(message)])
            if following:
                self._log.append(following)
            # The log's status, not this object's: another process may have moved it on.
            status = self._log.read_status()[0]
            after = decide(Op.MESSAGE, status, False).status
            if after is not None and after is not status:
                self._status.set(after, "new user message")
        return event  # type: ignore[return-value]  # append gives back each event's kind

    def run(self, max_steps: int = 50) -> ConversationStatus:
        """Ask the model and run its calls until the agent ends its turn, waits for a
        confirmation, is paused, errs, is stuck, or ``max_steps`` model calls were made."""
        with self._running():
            return self._ending_cleanly(self._run, max_steps, False)

    def take_over(self, max_steps: int = 50) -> ConversationStatus:
        """Run on a run whose process died (the log says RUNNING, its lease expired): as
        ``run``, and a pause or interrupt asked of that run and recorded in the log (before
        it died, or after, while its lease still held) is honoured here at the first safe
        point. A ``run`` ignores them: a user who runs again meant a new run."""
        with self._running():
            return self._ending_cleanly(self._run, max_steps, True)

    def _run(self, max_steps: int, taken_over: bool) -> ConversationStatus:
        status, reason = self._log.read_status()
        rule = decide(Op.RUN, status, bool(self.pending_actions()))
        if rule.outcome is Outcome.ANSWER_FIRST:  # nothing is asked: the calls need an answer
            self._status.remember(status, reason)
            if status is not Status.WAITING_FOR_CONFIRMATION:
                return self._status.set(Status.WAITING_FOR_CONFIRMATION, AWAITING_ANSWER)
            return status
        if rule.outcome is Outcome.RECOVER:  # a run that died left them: they may have run
            close_open_calls(self._log, "crash")
        watch_from = None
        if taken_over and status is Status.RUNNING:
            watch_from = run_began(self.store, self.id)
        self._extensions.run_started()
        self._loop.begin(set(), watch_from=watch_from)
        with (
            self._loop.interrupt_watcher(),
            self._loop.model_calls,
        ):  # the run's threads end with it
            return self._steps(max_steps)

    def _steps(self, max_steps: int) -> ConversationStatus:
        for _ in range(max_steps):
            # One read of the row a step: the log's end for both kinds of request, the usage
            # totals and budgets for the step's budget check.
            row = self.store.get_conversation(self.id)
            top = row.event_count - 1
            self.deliver_queued_messages(top)  # every call so far has its result
            if self._pause_requested.check(top):  # a pause recorded since comes next step
                return self._loop.record_pause()
            outcome = self._loop.step(row)
            if outcome is not None:
                return outcome
        return self._status.set(Status.IDLE, f"stopped after {max_steps} steps; run again to go on")

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
            close_open_calls(self._log, "crash")
        self._loop.record_pause()

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
        self._loop.interrupt_now()

    def request_pause(self, kind: PauseKind = "pause") -> None:
        """Record that the user asked the run in progress to pause: whichever process holds
        the run stops at its next safe point (see ``PauseRequest``)."""
        self._log.append_side(pause_request_event(self.head or ROOT, kind))

    def check_pending(self, action_ids: Sequence[str] | None = None) -> list[ActionEvent]:
        """The calls a confirm or a reject of ``action_ids`` (default: all) would answer, when
        the log says they wait for confirmation: ``NothingPending``, ``NotWaiting`` (a run,
        maybe in another process, is running them) or ``NotPending`` otherwise. A caller that
        serves other processes checks this holding the run lease."""
        return choose_pending(self.pending_actions(), self._log.read_status()[0], action_ids)

    def confirm(self, action_ids: Sequence[str] | None = None) -> ConversationStatus:
        """Run the pending calls the user confirmed (all of them by default); the others stay
        pending. ``NotWaiting`` while the log says a run is running them."""
        with self._running():
            chosen = choose_pending(self.pending_actions(), self._log.read_status()[0], action_ids)
            return self._ending_cleanly(self._confirm, chosen)

    def _confirm(self, chosen: Sequence[ActionEvent]) -> ConversationStatus:
        self._loop.begin({action.id for action in chosen}, "confirmed by the user")
        with self._loop.interrupt_watcher():
            outcome = self._loop.run_calls(chosen)
        return outcome or self._after_user_decision()

    def reject(
        self, action_ids: Sequence[str] | None = None, reason: str = "User rejected the action"
    ) -> ConversationStatus:
        """Answer the pending calls the user refused with user-rejection events."""
        with self._running():
            chosen = choose_pending(self.pending_actions(), self._log.read_status()[0], action_ids)
            return self._ending_cleanly(self._reject, chosen, reason)

    def _reject(self, chosen: Sequence[ActionEvent], reason: str) -> ConversationStatus:
        for rejection in rejections(chosen, reason):  # one at a time: each a stored answer
            self._log.append([rejection])
        return self._after_user_decision()

    def switch_branch(self, event_id: str, *, restore_files: bool = False) -> RestoreView | None:
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
            self._status.set(status, f"switched to the branch of {event_id}" + (why and f": {why}"))
        return restored

    def restore_snapshot(self, snapshot_id: str) -> RestoreView:
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
        return fork_conversation(
            self, event_id, title=title, restore_files=restore_files, workspace=workspace
        )

    # -- budgets ---------------------------------------------------------------------------

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

    # -- ending a run that failed or was stopped ---------------------------------------------

    def _ending_cleanly(
        self, operation: Callable[..., ConversationStatus], *args: object
    ) -> ConversationStatus:
        """Run ``operation``; whatever it raises, open calls are closed and the log says how
        the run ended (ERROR with the cause, or PAUSED for an interrupt): never "running".
        The log keeps its head meanwhile (``ConversationLog.keeping_head``)."""
        try:
            with self._log.keeping_head():
                return operation(*args)
        except KeyboardInterrupt as stop:  # Ctrl-C, or a signal the caller turned into one
            self._record_stop(str(stop) or "an interrupt")
            raise
        except Exception as error:
            return record_failure(
                error,
                conversation_id=self.id,
                mask=self.secrets.mask,
                record=self._loop.record_error,
            )

    def _record_stop(self, why: str) -> None:
        """An interrupted run (Ctrl-C, SIGTERM): open calls closed as interrupted by the user
        (a command in progress was stopped with what it started, ``BashSession.run``), the stop
        recorded (PAUSED, with the reason)."""
        try:
            self._loop.record_stop(why)
        except Exception:  # the store cannot take it: the interrupt still ends the run
            logger.exception("could not record the stop of conversation %s", self.id)

    def _after_user_decision(self) -> ConversationStatus:
        if self.pending_actions():
            return self._status.set(Status.WAITING_FOR_CONFIRMATION)
        if self.status is Status.RUNNING or self.status is Status.WAITING_FOR_CONFIRMATION:
            return self._status.set(Status.IDLE, "every call answered; run to continue")
        return self.status

    def _running(self) -> _RunGuard:
        return _RunGuard(self._run_lock, self.id)


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
