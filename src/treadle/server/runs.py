"""Background runs of conversations in a server process, under a run lease.

A run (or a confirmation, which runs tools) happens in a thread; the lease makes sure exactly
one server process runs a conversation at a time. A watcher takes over conversations whose
holder stopped renewing (crashed): it reopens them and runs on, which first closes the calls
the crash interrupted. A conversation this server cannot run (its settings reach what it
refuses, its workspace moved) is not retried every cycle: the refusal is recorded once, as
status ERROR with the reason, and the dead holder's lease is cleared.

Across processes: a short change (reject, switch branch, delete, replace, a message or a pause
while nothing runs) holds the lease too, so it never lands inside another server's run; a pause
or a message sent while a run holds the lease is recorded in the log (``runtime/requests.py``)
and honoured by the holder at its next safe point (or, when the holder died first, by the
process that takes the run over: ``Conversation.take_over``); an interrupt is recorded the same way, and
the holder's watcher (``runtime/interrupts.py``) stops the calls in progress as soon as it
sees it.

Lifetimes: a conversation's object (and with it its tools' processes, e.g. its shell) is kept
for ``idle_timeout_s`` after its last use or run, then closed and dropped; 0 closes it as soon
as its run ends. A cached object whose conversation was deleted or replaced (another
``created_at``) is noticed on use and reopened.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from treadle.events.model import ROOT, MessageEvent
from treadle.runtime.continuing import store_missing_settings
from treadle.runtime.conversation import Conversation
from treadle.runtime.errors import ConversationBusy, ConversationError, NotRunnable, TooManyRunning
from treadle.runtime.live_output import OutputListener
from treadle.runtime.llm.base import ModelError
from treadle.runtime.requests import PauseKind
from treadle.runtime.settings import (
    ConversationSettings,
    SandboxRefused,
    SettingsError,
    SettingsPolicy,
)
from treadle.runtime.status import ConversationStatus, read_status, status_event
from treadle.runtime.workspace.base import WorkspaceError, WorkspacePathError
from treadle.server.limits import MAX_RUNNING
from treadle.store.base import ConversationInfo, ConversationNotFound, EventStore
from treadle.store.leases import SERVER, RunLeases, new_owner

logger = logging.getLogger(__name__)

Operation = Callable[[Conversation], Any]
PolicyFor = Callable[[str, SettingsPolicy], SettingsPolicy]
"""The policy one conversation is opened with, from the process's (raises NotRunnable to
refuse it): how the OpenHands API gives a conversation its client's in-memory model key."""
Check = Callable[[Conversation], object]  # raises to refuse; what it returns is not used


class SharedLimit(Protocol):
    """``--max-running`` shared with other processes (``server/workers/run_slots.py``)."""

    def take(self) -> int | None: ...
    def give(self, index: int) -> None: ...


DEFAULT_IDLE_TIMEOUT_S = 300.0
"""Seconds a conversation's object and its shell stay open after its last use or run."""

NOT_RUNNABLE = (
    ConversationError,
    ModelError,
    SettingsError,
    SandboxRefused,
    WorkspaceError,
    WorkspacePathError,
)
"""Why a stored conversation cannot be opened here (its settings reach what this server
refuses, or its workspace moved): ``NotRunnable`` to a client, a recorded refusal to the
watcher."""

SERVER_STOPPED = "paused because the server stopped; run again to continue"
LEASE_LOST = (
    "paused here: this server lost the run lease (it stalled past it), so another process may "
    "run the conversation now"
)
LEASE_UNRENEWED = (
    "paused: this server could not renew its run lease (its store did not answer) for longer "
    "than the lease lasts; run again to continue"
)


@dataclass
class _Entry:
    conversation: Conversation
    created_at: datetime
    last_used: float = field(default_factory=time.monotonic)
    thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class RunManager:
    def __init__(
        self,
        store: EventStore,
        leases: RunLeases,
        *,
        lease_ttl_s: float = 10.0,
        takeover: bool = True,
        policy: SettingsPolicy | None = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        max_running: int = MAX_RUNNING,
        model_key: str | None = None,
        live_output: OutputListener | None = None,
        owner_group: str | None = None,
        takes_over: Callable[[str], bool] | None = None,
        shared_limit: SharedLimit | None = None,
    ) -> None:
        """``owner_group``: the lease owner prefix this process shares with the other workers
        of its ``treadle serve`` (``is_ours``). ``takes_over``: which crashed conversations
        this process runs on (default: any); a worker takes those routed to it only.
        ``shared_limit``: the server's --max-running, when its workers share it."""
        self.shared_limit = shared_limit
        self.store = store
        self.live_output = live_output
        """Told the output of every call in progress here (the stream's transient frames)."""
        self.model_key = model_key
        """This process's model key (its caller read it from the environment): masked."""
        self.policy = policy or SettingsPolicy()
        """What stored settings may reach when this process opens a conversation."""
        self.policy_for: PolicyFor | None = None
        """Set by whoever gives some conversations a policy of their own (``PolicyFor``)."""
        self.leases = leases
        self.owner_group = owner_group
        self.owner = f"{owner_group}.{uuid.uuid4().hex[:8]}" if owner_group else new_owner(SERVER)
        self.takes_over = takes_over
        self.lease_ttl_s = lease_ttl_s
        self.takeover = takeover
        self.idle_timeout_s = idle_timeout_s
        self._entries: dict[str, _Entry] = {}
        self.max_running = max_running
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, name="treadle-lease-watch", daemon=True
        )
        self._watcher.start()

    def conversation(
        self, conversation_id: str, settings_if_missing: ConversationSettings | None = None
    ) -> Conversation:
        """This process's object for a stored conversation (opened from its settings, or
        ``settings_if_missing`` when it has none; reopened when the stored conversation is not
        the one it was opened from)."""
        info = self.store.get_conversation(conversation_id)
        stale = None
        with self._lock:
            entry = self._entries.get(conversation_id)
            if entry is not None and entry.created_at != info.created_at and not entry.running:
                stale, entry = self._entries.pop(conversation_id), None
            if entry is None:
                conversation = self._open(conversation_id, settings_if_missing)
                entry = _Entry(conversation, info.created_at)
                self._entries[conversation_id] = entry
            entry.last_used = time.monotonic()
            found = entry.conversation
        if stale is not None:
            stale.conversation.close()
        return found

    def create(
        self,
        settings: ConversationSettings,
        *,
        conversation_id: str | None = None,
        title: str | None = None,
    ) -> ConversationInfo:
        """Store a new conversation (``ConversationExists`` when ``conversation_id`` is taken)
        and keep this process's object for it, as ``conversation`` would open it: the first
        message or run does not build its parts again. Not kept when another worker of this
        server serves it."""
        # The process's policy: ``policy_for`` is for stored conversations (their clients'
        # keys), and this one is new.
        conversation = self._listened(
            Conversation.create(
                self.store,
                settings,
                id=conversation_id,
                title=title,
                policy=self.policy,
                model_key=self.model_key,
            )
        )
        try:
            info = self.store.get_conversation(conversation.id)
        except BaseException:
            conversation.close()
            raise
        with self._lock:
            # ``takes_over`` is the worker's own conversations (those routed to it).
            kept = (self.takes_over is None or self.takes_over(info.id)) and (
                info.id not in self._entries  # opened by another request meanwhile
            )
            if kept:
                self._entries[info.id] = _Entry(conversation, info.created_at)
        if not kept:
            conversation.close()
        return info

    def _open(
        self, conversation_id: str, settings_if_missing: ConversationSettings | None = None
    ) -> Conversation:
        policy = self.policy
        if self.policy_for is not None:
            policy = self.policy_for(conversation_id, policy)
        try:
            conversation = Conversation.open(
                self.store,
                conversation_id,
                policy=policy,
                model_key=self.model_key,
                settings_if_missing=settings_if_missing,
            )
        except NOT_RUNNABLE as error:
            if isinstance(error, NotRunnable):
                raise
            raise NotRunnable(str(error)) from error
        return self._listened(conversation)

    def _listened(self, conversation: Conversation) -> Conversation:
        """``conversation`` with this process's listener of live output (the stream's)."""
        if self.live_output is not None:
            conversation.output_listeners.append(self.live_output)
        return conversation

    def forget(self, conversation_id: str) -> None:
        with self._lock:
            entry = self._entries.pop(conversation_id, None)
        if entry is not None:
            entry.conversation.close()

    def cached(self) -> int:
        """How many conversation objects this process holds (running or idle)."""
        with self._lock:
            return len(self._entries)

    def is_ours(self, holder: str | None) -> bool:
        """Whether a lease ``holder`` is this process, or another worker of its server."""
        if holder is None or self.owner_group is None:
            return False
        # A short change's hold (``_try_hold``: "OWNER/…") is not a run.
        return holder.startswith(f"{self.owner_group}.") and "/" not in holder

    def is_running(self, conversation_id: str) -> bool:
        entry = self._entries.get(conversation_id)
        return entry is not None and entry.running

    def start(
        self,
        conversation_id: str,
        operation: Operation,
        name: str,
        check: Check | None = None,
        settings_if_missing: ConversationSettings | None = None,
    ) -> None:
        """Run ``operation`` on the conversation in the background: ``ConversationBusy`` when
        it already runs here or in another server, ``TooManyRunning`` when this server runs
        all it may. ``check`` runs first, under the lease (what it raises is the answer).
        ``settings_if_missing``: settings for a conversation that has none, stored with it
        under the lease (``NotRunnable`` when another request stored others first)."""
        if settings_if_missing is not None:
            check = _storing(settings_if_missing, self.store, check)
        conversation = self.conversation(conversation_id, settings_if_missing)
        try:
            self._start(conversation, operation, name, check)
        except BaseException:
            if settings_if_missing is not None:
                self.forget_object(conversation)  # its settings were not stored
            raise

    def forget_object(self, conversation: Conversation) -> None:
        """Close and drop ``conversation`` if it is still this process's object for its id."""
        with self._lock:
            entry = self._entries.get(conversation.id)
            if entry is None or entry.conversation is not conversation or entry.running:
                return
            del self._entries[conversation.id]
        conversation.close()

    def _start(
        self, conversation: Conversation, operation: Operation, name: str, check: Check | None
    ) -> None:
        conversation_id = conversation.id
        _check_confined(conversation)
        with self._lock:
            if self.is_running(conversation_id):
                raise ConversationBusy(conversation_id, "is running")
            running = sum(entry.running for entry in self._entries.values())
            if running >= self.max_running:
                raise TooManyRunning(
                    f"this server already runs {running} conversations (its --max-running); "
                    "retry when one ends, or pause one"
                )
            place = None
            if self.shared_limit is not None:
                place = self.shared_limit.take()
                if place is None:
                    raise TooManyRunning(
                        f"this server already runs {self.max_running} conversations (its "
                        "--max-running, over all its workers); retry when one ends, or pause one"
                    )
            if not self.leases.acquire(conversation_id, self.owner, self.lease_ttl_s):
                self._give(place)
                raise ConversationBusy(conversation_id, "runs in another server")
            try:
                if check is not None:
                    check(conversation)
                thread = threading.Thread(
                    target=self._guarded,
                    args=(conversation, operation, place),
                    name=f"treadle-{name}-{conversation_id[:8]}",
                    daemon=True,
                )
                entry = self._entries.get(conversation_id)
                if entry is None or entry.conversation is not conversation:
                    # Forgotten or replaced since we opened it: run the object we checked.
                    entry = _Entry(
                        conversation, self.store.get_conversation(conversation_id).created_at
                    )
                    self._entries[conversation_id] = entry
                entry.thread = thread
                thread.start()
            except BaseException:
                _logged(self.leases.release, conversation_id, self.owner)  # keep the cause
                self._give(place)
                raise

    def _give(self, place: int | None) -> None:
        if place is not None and self.shared_limit is not None:
            _logged(self.shared_limit.give, place)

    @contextmanager
    def exclusive(self, conversation_id: str, what: str) -> Iterator[None]:
        """Hold the run lease during a short change; ``ConversationBusy`` (naming ``what``)
        while the conversation runs here or in another server."""
        owner = self._try_hold(conversation_id)
        if owner is None:
            raise ConversationBusy(conversation_id, f"is running: {what}")
        try:
            yield
        finally:
            self.leases.release(conversation_id, owner)

    def pause(self, conversation_id: str, kind: PauseKind = "pause") -> None:
        """Pause now when nothing runs the conversation; else record the request for the
        process that runs it (this one or another)."""
        owner = self._try_hold(conversation_id)
        if owner is None:
            conversation = self.conversation(conversation_id)
            if self.is_running(conversation_id):
                conversation.pause(kind)  # our run: its flag, and a request in the log
            else:
                conversation.request_pause(kind)  # another process runs it
            return
        try:
            self.conversation(conversation_id).pause(kind)  # nothing runs: paused now
        finally:
            self.leases.release(conversation_id, owner)

    def interrupt(self, conversation_id: str) -> None:
        """Stop the calls in progress now, then pause: in this process directly when its run
        is here; else recorded in the log, where the process that runs it (any server, or a
        CLI run) notices it within ``runtime.interrupts.WATCH_INTERVAL_S``. When nothing runs
        the conversation it pauses now, as ``pause`` does."""
        owner = self._try_hold(conversation_id)
        if owner is None:
            conversation = self.conversation(conversation_id)
            if self.is_running(conversation_id):
                conversation.interrupt()  # our run: stopped now, and a request in the log
            else:
                conversation.request_pause("interrupt")  # another process runs it
            return
        try:
            self.conversation(conversation_id).pause("interrupt")  # nothing runs: paused now
        finally:
            self.leases.release(conversation_id, owner)

    def send_message(self, conversation_id: str, text: str) -> tuple[MessageEvent, bool]:
        """Store a user message now when nothing runs the conversation; else queue it for the
        run's holder. Returns the message and whether it was queued."""
        owner = self._try_hold(conversation_id)
        if owner is None:
            message = self.conversation(conversation_id).queue_message(text)
            self._deliver_if_free(conversation_id)  # the run may have ended meanwhile
            return message, True
        try:
            conversation = self.conversation(conversation_id)
            _check_confined(conversation)  # the first message snapshots the workspace
            conversation.deliver_queued_messages()  # earlier messages first
            return conversation.send_message(text), False
        finally:
            self.leases.release(conversation_id, owner)

    def wait(self, conversation_id: str, timeout: float | None = None) -> None:
        entry = self._entries.get(conversation_id)
        if entry is not None and entry.thread is not None:
            entry.thread.join(timeout)

    def shutdown(self) -> None:
        """Pause what runs here (only that), wait for it, close every conversation. One
        conversation that fails to pause or close does not keep the others (or the leases)
        open."""
        self._stopping.set()
        with self._lock:
            running = [entry for entry in self._entries.values() if entry.running]
        for entry in running:
            # The stop is this server's, not the user's: its own reason, no request in the log.
            _logged(entry.conversation.pause, local_only=True, reason=SERVER_STOPPED)
        for entry in running:
            if entry.thread is not None:
                entry.thread.join(timeout=10)
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            _logged(entry.conversation.close)
        self._watcher.join(timeout=10)
        _logged(self.leases.close)

    def _try_hold(self, conversation_id: str) -> str | None:
        """Take the lease for a short change under an owner of its own (so it conflicts with
        this process's runs too); None when someone runs the conversation."""
        owner = f"{self.owner}/{uuid.uuid4().hex[:8]}"
        return owner if self.leases.acquire(conversation_id, owner, self.lease_ttl_s) else None

    def _deliver_if_free(self, conversation_id: str) -> None:
        """Deliver queued messages when no run holds the lease (else its holder will)."""
        owner = self._try_hold(conversation_id)
        if owner is None:
            return
        try:
            self.conversation(conversation_id).deliver_queued_messages()
        except ConversationNotFound:
            pass
        finally:
            self.leases.release(conversation_id, owner)

    def _guarded(
        self, conversation: Conversation, operation: Operation, place: int | None = None
    ) -> None:
        stop_renewing = threading.Event()
        renewer = threading.Thread(
            target=self._renew, args=(conversation, stop_renewing), daemon=True
        )
        renewer.start()
        failed = False
        try:
            operation(conversation)
            conversation.deliver_queued_messages()  # those sent after the last safe point
        except Exception as error:  # never kill the server; the failure is recorded
            logger.exception("run of conversation %s failed", conversation.id)
            self._record_failure(conversation, error)
            failed = True
        finally:
            stop_renewing.set()
            renewer.join()
            # A release that fails (store out) must not skip the clean-up below: the lease
            # then expires by itself, and the status says what happened.
            _logged(self.leases.release, conversation.id, self.owner)
            self._give(place)
        try:
            # A message queued between our last delivery and the release is ours to deliver.
            self._deliver_if_free(conversation.id)
        except Exception:
            logger.exception("delivering queued messages of %s failed", conversation.id)
        finally:
            # A failed object's state is suspect (reopen it from the log); with no idle
            # timeout, its shell goes now.
            drop = failed or self.idle_timeout_s <= 0
            with self._lock:
                entry = self._entries.get(conversation.id)
                ours = entry if entry is not None and entry.conversation is conversation else None
                if ours is not None and drop:
                    del self._entries[conversation.id]
                elif ours is not None:
                    ours.last_used = time.monotonic()
            if drop:
                conversation.close()

    def _record_failure(self, conversation: Conversation, error: Exception) -> None:
        """Status ERROR with the cause, unless the conversation recorded its error itself: a
        failed background run must be visible to clients (API, stream, Canvas), not only in
        the server's log."""
        try:
            status, _reason = read_status(self.store, conversation.id)
            if status is ConversationStatus.ERROR:
                return
            reason = conversation.secrets.mask(f"the run failed: {type(error).__name__}: {error}")
            event = status_event(
                ConversationStatus.ERROR, self.store.head(conversation.id) or ROOT, reason
            )
            self.store.append(conversation.id, event, move_head=False)
        except Exception:
            logger.exception("could not record the failure of %s", conversation.id)

    def _renew(self, conversation: Conversation, stop: threading.Event) -> None:
        """Renew the run's lease until ``stop``. When it is lost, or cannot be renewed for as
        long as it lasts (another server may then take the run over), the run pauses here at
        its next safe point. Never dies silently: a run must not outlive its lease unnoticed."""
        renewed = time.monotonic()
        failing = False
        try:
            while not stop.wait(self.lease_ttl_s / 3):
                try:
                    held = self.leases.renew(conversation.id, self.owner, self.lease_ttl_s)
                except Exception as error:
                    if not failing:
                        logger.warning(
                            "could not renew the run lease of %s (%s); retrying",
                            conversation.id,
                            error,
                        )
                    failing = True
                    if time.monotonic() - renewed < self.lease_ttl_s:
                        continue
                    why = LEASE_UNRENEWED
                else:
                    if held:
                        renewed, failing = time.monotonic(), False
                        continue
                    why = LEASE_LOST  # another server took over: we stalled past the lease
                logger.warning("run lease of %s: %s", conversation.id, why)
                conversation.pause(local_only=True, reason=why)  # the new holder's run goes on
                return
        except Exception:
            logger.exception("the lease renewer of %s failed", conversation.id)

    def _drop_idle(self, conversation_id: str | None = None) -> None:
        """Close and drop the objects not running and unused for ``idle_timeout_s`` (with an
        id: that one only)."""
        now = time.monotonic()
        with self._lock:
            idle = [
                key
                for key, entry in self._entries.items()
                if (conversation_id is None or key == conversation_id)
                and not entry.running
                and now - entry.last_used >= self.idle_timeout_s
            ]
            dropped = [self._entries.pop(key) for key in idle]
        for entry in dropped:
            _logged(entry.conversation.close)  # one failing close leaves no other shell open

    def _watch(self) -> None:
        interval = self.lease_ttl_s / 2
        if self.idle_timeout_s > 0:
            interval = min(interval, self.idle_timeout_s / 2)
        # What failed last, by conversation ("" for the watcher itself): a failure is logged
        # when it starts or changes (e.g. the store went out), not every cycle.
        failing: dict[str, str] = {}

        def failed(key: str, error: Exception, what: str) -> None:
            if failing.get(key) != repr(error):
                logger.exception("%s; retrying", what)
            failing[key] = repr(error)

        while not self._stopping.wait(interval):
            try:
                self._drop_idle()
                expired = self.leases.expired(kind=SERVER) if self.takeover else []
                failing.pop("", None)
            except Exception as error:
                failed("", error, "lease watcher failed")
                continue
            for gone in set(failing) - {"", *expired}:
                del failing[gone]
            # Only runs a server started: a dead CLI run waits for someone to run it again.
            if self.takes_over is not None:
                expired = [key for key in expired if self.takes_over(key)]
            for conversation_id in expired:
                if self._stopping.is_set():
                    break
                try:  # one conversation's trouble never starves the others
                    self._take_over(conversation_id)
                    failing.pop(conversation_id, None)
                except Exception as error:
                    failed(conversation_id, error, f"taking over {conversation_id} failed")

    def _take_over(self, conversation_id: str) -> None:
        """Run on a conversation whose server crashed, or record once why this server will not
        (its lease cleared: the watcher does not meet it again until someone runs it again)."""
        if self.is_running(conversation_id):
            return  # our own run, late renewing: its renewer decides
        hold = self._try_hold(conversation_id)  # the dead holder's lease, while we decide
        if hold is None:
            return  # renewed after all, or another server is deciding
        try:
            try:
                status, _reason = read_status(self.store, conversation_id)
            except ConversationNotFound:
                return  # deleted: its stale lease goes with our hold
            if status is not ConversationStatus.RUNNING:
                return  # it ended before its holder released the lease
            try:
                conversation = self.conversation(conversation_id)
                conversation.workspace.resolve(".")  # moved out of the root since?
            except NOT_RUNNABLE as error:
                self._refuse_takeover(conversation_id, error)
                return
        finally:
            self.leases.release(conversation_id, hold)
        try:
            self.start(conversation_id, lambda c: c.take_over(), "takeover")
            logger.info("took over conversation %s from a crashed server", conversation_id)
        except (ConversationBusy, TooManyRunning, NotRunnable) as error:
            # Another server was faster, this one runs all it may, or its workspace moved in
            # between (next cycle, then).
            logger.info("not taking over %s now: %s", conversation_id, error)

    def _refuse_takeover(self, conversation_id: str, error: Exception) -> None:
        """ERROR with why this server will not run it on, visible to clients (API, stream,
        Canvas) and decided once, instead of an error in the log every cycle."""
        reason = (
            f"interrupted: the server that ran it stopped, and server {self.owner} will not "
            f"take the run over: {error}; fix that and run it again"
        )
        logger.warning("not taking over conversation %s: %s", conversation_id, error)
        event = status_event(
            ConversationStatus.ERROR, self.store.head(conversation_id) or ROOT, reason
        )
        self.store.append(conversation_id, event, move_head=False)


def _check_confined(conversation: Conversation) -> None:
    """``NotRunnable`` when the workspace is no longer inside the root (real paths): its
    folder may have been replaced by a symlink since the conversation was opened."""
    try:
        conversation.workspace.resolve(".")
    except WorkspacePathError as error:
        raise NotRunnable(str(error)) from None


def _storing(settings: ConversationSettings, store: EventStore, then: Check | None) -> Check:
    """A check that stores ``settings`` with a conversation that has none (under the lease
    ``start`` holds), then runs ``then``."""

    def check(conversation: Conversation) -> None:
        if not store_missing_settings(store, conversation.id, settings):
            raise NotRunnable(
                f"conversation {conversation.id} was given settings by another request "
                "meanwhile: run it again without settings"
            )
        if then is not None:
            then(conversation)

    return check


def _logged(action: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run a clean-up step; a failure is logged, and the next steps still run."""
    try:
        action(*args, **kwargs)
    except Exception:
        logger.exception("%s failed", getattr(action, "__qualname__", action))
