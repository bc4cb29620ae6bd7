"""Noticing, while a run is in progress, an interrupt the user sent to any process sharing the
store: a watcher per run polls the run's log for an interrupt request
(``runtime/requests.py``) and, on the first it sees, calls back once to stop the calls in
progress (the conversation then kills what its tools started). And waiting for work done in
another thread (a model call, parallel tool calls) unless the run is interrupted: then it is
abandoned after a short grace.

Why polling: an interrupt may reach a server that does not run the conversation; the one that
does learns of it only through the store. ``WATCH_INTERVAL_S`` bounds how late it learns. All
of a process's runs are polled by one thread, which reads the end of every due run's log in
one read per store (``EventStore.event_counts``: one small query for hundreds of runs, not one
each), then searches a log only when it grew by another writer's events.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from treadle.store.base import EventStore

logger = logging.getLogger(__name__)

T = TypeVar("T")

WATCH_INTERVAL_S = 0.2
"""How often a running conversation's log is checked for an interrupt request."""


class InterruptWatcher:
    """While entered, calls ``on_interrupt`` (once) as soon as ``requested(top)`` says True.

    Every watcher of the process is polled by one thread (``_Watching``), started by the first
    watcher entered and ended (joined) by the last one's exit: a server running hundreds of
    conversations keeps one polling thread, not one each. ``on_interrupt`` runs on that thread
    and must be quick (it signals the calls to stop; it does not wait for them).

    ``log``: the (store, conversation id) whose log ``requested`` reads; the thread then reads
    its last seq together with the other watchers' of the same store and passes it as ``top``
    (None: ``requested`` reads it, as it does for a watcher without ``log``)."""

    def __init__(
        self,
        requested: Callable[[int | None], bool],
        on_interrupt: Callable[[], None],
        *,
        name: str = "treadle-interrupt-watch",
        interval_s: float = WATCH_INTERVAL_S,
        log: tuple[EventStore, str] | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self._requested = requested
        self._on_interrupt = on_interrupt
        self.interval_s = interval_s
        self.next_poll = 0.0
        """When the shared thread polls this watcher next (``time.monotonic``)."""
        self._polling = threading.Lock()
        """Held while this watcher is polled: an exit waits for a poll in progress."""
        self._done = False
        self._failing = False

    def __enter__(self) -> InterruptWatcher:
        self.next_poll = next_tick(time.monotonic(), self.interval_s)
        _WATCHING.add(self)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        with self._polling:  # no callback after the exit returns
            self._done = True
        _WATCHING.remove(self)

    def poll(self, top: int | None = None) -> None:
        """Ask once (on the shared thread), ``top`` the log's last seq if just read; on the
        first yes, call back and stop watching."""
        with self._polling:
            if self._done:
                return
            try:
                if not self._requested(top):
                    self._failing = False
                    return
            except Exception:  # the store did not answer: try again next interval
                if not self._failing:
                    logger.warning(
                        "%s: checking for an interrupt failed; retrying", self.name, exc_info=True
                    )
                self._failing = True
                return
            self._done = True
            try:
                self._on_interrupt()
            except Exception:
                logger.exception("%s: stopping the interrupted calls failed", self.name)


class _Watching:
    """The process's one polling thread over every entered ``InterruptWatcher``, each at its
    own interval; it ends when the last watcher leaves (joined then: nothing stays behind)."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._watchers: set[InterruptWatcher] = set()
        self._thread: threading.Thread | None = None

    def add(self, watcher: InterruptWatcher) -> None:
        with self._changed:
            self._watchers.add(watcher)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="treadle-interrupt-watch", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def remove(self, watcher: InterruptWatcher) -> None:
        with self._changed:
            self._watchers.discard(watcher)
            ending = self._thread if not self._watchers else None
            if ending is not None:
                self._thread = None  # the thread sees it is no longer the one and returns
            self._changed.notify_all()
        if ending is not None and ending is not threading.current_thread():
            ending.join()

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._changed:
                if self._thread is not me:
                    return
                now = time.monotonic()
                due = [watcher for watcher in self._watchers if watcher.next_poll <= now]
                if not due:
                    soonest = min((w.next_poll for w in self._watchers), default=now + 1.0)
                    self._changed.wait(max(0.0, soonest - now))
                    continue
                for watcher in due:
                    watcher.next_poll = next_tick(now, watcher.interval_s)
            ends = _log_ends(due)  # outside the lock: polls read the store
            for watcher in due:
                watcher.poll(ends.get(watcher))


def next_tick(now: float, interval_s: float) -> float:
    """The first multiple of ``interval_s`` after ``now``: watchers of one interval come due
    together, whenever each was entered, so their logs are read in one query."""
    return (math.floor(now / interval_s) + 1) * interval_s


def _log_ends(watchers: list[InterruptWatcher]) -> dict[InterruptWatcher, int]:
    """The last seq of each watcher's log, one read per store for all its watchers. A read
    that fails leaves its watchers out: each then reads its own log (and says if that fails)."""
    by_store: dict[int, tuple[EventStore, list[tuple[InterruptWatcher, str]]]] = {}
    for watcher in watchers:
        if watcher.log is not None:
            store, conversation_id = watcher.log
            by_store.setdefault(id(store), (store, []))[1].append((watcher, conversation_id))
    ends: dict[InterruptWatcher, int] = {}
    for store, group in by_store.values():
        try:
            counts = store.event_counts([conversation_id for _, conversation_id in group])
        except Exception:
            continue
        for watcher, conversation_id in group:
            if conversation_id in counts:
                ends[watcher] = counts[conversation_id] - 1
    return ends


_WATCHING = _Watching()


def _reset_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts with no watcher."""
    global _WATCHING
    _WATCHING = _Watching()


os.register_at_fork(after_in_child=_reset_after_fork)


ABANDON_GRACE_S = 0.5
"""How long a call in another thread gets to return once the run is interrupted (its tool was
told to stop) before it is abandoned: the run ends without it, its result is dropped."""
_CHECK_S = 0.05


class Abandoned(Exception):
    """The run was interrupted and the call did not return within its grace: left behind."""


class Interruption(threading.Event):
    """A run's interruption flag (``ToolContext.interruption``) that also wakes whoever waits
    on it with ``wakes``: a wait for a call's result then sleeps until the call ends or the run
    is interrupted, where polling both cost a thread wakeup every 50 ms of every model call."""

    def __init__(self) -> None:
        super().__init__()
        self._waiters_lock = threading.Lock()
        self._waiters: list[threading.Event] = []

    def set(self) -> None:
        super().set()
        with self._waiters_lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.set()

    @contextmanager
    def wakes(self, waiter: threading.Event) -> Iterator[None]:
        """While entered, setting this sets ``waiter`` too (at once when it is set already)."""
        with self._waiters_lock:
            self._waiters.append(waiter)
        if self.is_set():
            waiter.set()
        try:
            yield
        finally:
            with self._waiters_lock:
                self._waiters.remove(waiter)


def result_unless_interrupted(
    future: Future[T], interruption: threading.Event, grace_s: float = ABANDON_GRACE_S
) -> T:
    """``future``'s result (or its exception); ``Abandoned`` when ``interruption`` is set and
    the future is not done ``grace_s`` later. The thread computing it is not stopped: it ends
    on its own, and what it returns is dropped. With an ``Interruption`` the wait sleeps until
    one of the two happens; a plain event is polled every 50 ms (an interruption seen with no
    grace left then wins over a result that is ready)."""
    if isinstance(interruption, Interruption):
        return _woken_result(future, interruption, grace_s)
    interrupted_at: float | None = None
    while True:
        if interruption.is_set():
            now = time.monotonic()
            interrupted_at = interrupted_at if interrupted_at is not None else now
            if now - interrupted_at >= grace_s:
                raise Abandoned()
        try:
            return future.result(timeout=_CHECK_S)
        except FutureTimeout:
            pass


def _woken_result(future: Future[T], interruption: Interruption, grace_s: float) -> T:
    """``result_unless_interrupted`` without polling: one wait, woken by the future's end or
    by the interruption."""
    woken = threading.Event()
    future.add_done_callback(lambda _done: woken.set())
    with interruption.wakes(woken):
        woken.wait()
    if interruption.is_set() and not future.done():
        # A result that comes within _CHECK_S of the interruption is still taken, as the
        # polling wait took one that came before its next look (a model answering as it is
        # interrupted: its calls are then recorded as never started, not lost).
        try:
            return future.result(timeout=max(grace_s, _CHECK_S))
        except FutureTimeout:
            raise Abandoned() from None
    return future.result()


def in_thread(function: Callable[[], T], name: str) -> Future[T]:
    """Run ``function`` in a daemon thread of its own (one that may be abandoned: a pool's
    worker would stay busy for the next call); its outcome in the future returned."""
    future: Future[T] = Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(function())
        except BaseException as error:  # handed to whoever reads the future
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


CALL_THREAD_IDLE_S = 30.0
"""How long a ``CallThread``'s worker waits for the next call before it ends by itself."""


class CallThread:
    """Runs calls one at a time in a daemon thread kept between them (starting a thread per
    model call cost about 0.5 ms a step): each ``submit`` gives a future, as ``in_thread``
    does. A call left running (``Abandoned`` after an interrupt) keeps its worker, so the next
    call gets a fresh one; the old one ends when its call does. The owner ``close``s it (a
    conversation at the end of each run); an idle worker also ends by itself after
    ``idle_s``."""

    def __init__(self, name: str, idle_s: float = CALL_THREAD_IDLE_S) -> None:
        self._name = name
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._worker: _Worker | None = None

    def submit(self, function: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            worker = self._worker
            if worker is None or worker.busy or worker.ended:
                worker = self._worker = _Worker(self, self._name, self._idle_s)
            worker.busy = True
            worker.jobs.put((future, function))
        return future

    def call_unless_interrupted(
        self, function: Callable[[], T], interruption: threading.Event
    ) -> T:
        """``function``'s result, computed here; ``Abandoned`` when ``interruption`` is set,
        before it starts or while it runs (an interrupt already made wins over any answer)."""
        if interruption.is_set():
            raise Abandoned()
        return result_unless_interrupted(self.submit(function), interruption, grace_s=0)

    def __enter__(self) -> CallThread:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the worker: now when it is idle (joined), else when its call ends. A later
        ``submit`` starts another (a run ends with its thread; the next run has its own)."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.jobs.put(None)
            if not worker.busy:
                worker.thread.join()

    def _idle(self, worker: _Worker) -> bool:
        """Whether ``worker``, waiting ``idle_s`` for nothing, may end (then it is dropped)."""
        with self._lock:
            if not worker.jobs.empty():
                return False  # a call came as the wait ended
            worker.ended = True
            if self._worker is worker:
                self._worker = None
            return True

    def _done(self, worker: _Worker) -> bool:
        """``worker``'s call returned: whether it goes on serving (it is still the current)."""
        with self._lock:
            worker.busy = False
            return self._worker is worker


class _Worker:
    """One thread of a ``CallThread``, with its queue of calls (None: end)."""

    def __init__(self, owner: CallThread, name: str, idle_s: float) -> None:
        self.jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self.busy = False
        self.ended = False
        self._owner = owner
        self._idle_s = idle_s
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=self._idle_s)
            except queue.Empty:
                if self._owner._idle(self):
                    return
                continue
            if job is None:
                return
            future, function = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function())
                except BaseException as error:  # handed to whoever reads the future
                    future.set_exception(error)
            if not self._owner._done(self):
                return  # replaced while its call ran (abandoned): the fresh worker serves
