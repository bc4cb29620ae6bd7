"""Noticing, while a run is in progress, an interrupt the user sent to any process sharing the
store: a watcher thread per run polls the run's log for an interrupt request
(``runtime/requests.py``) and, on the first it sees, calls back once to stop the calls in
progress (the conversation then kills what its tools started). And waiting for work done in
another thread (a model call, parallel tool calls) unless the run is interrupted: then it is
abandoned after a short grace.

Why polling: an interrupt may reach a server that does not run the conversation; the one that
does learns of it only through the store. ``WATCH_INTERVAL_S`` bounds how late it learns
(one indexed query per interval per running conversation).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

WATCH_INTERVAL_S = 0.2
"""How often a running conversation's log is checked for an interrupt request."""


class InterruptWatcher:
    """While entered, calls ``on_interrupt`` (once) as soon as ``requested()`` says True."""

    def __init__(
        self,
        requested: Callable[[], bool],
        on_interrupt: Callable[[], None],
        *,
        name: str = "treadle-interrupt-watch",
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self._requested = requested
        self._on_interrupt = on_interrupt
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)

    def __enter__(self) -> InterruptWatcher:
        self._thread.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        failing = False
        while not self._stop.wait(self._interval_s):
            try:
                if not self._requested():
                    failing = False
                    continue
            except Exception:  # the store did not answer: try again next interval
                if not failing:
                    logger.warning("checking for an interrupt failed; retrying", exc_info=True)
                failing = True
                continue
            try:
                self._on_interrupt()
            except Exception:
                logger.exception("stopping the interrupted calls failed")
            return


ABANDON_GRACE_S = 0.5
"""How long a call in another thread gets to return once the run is interrupted (its tool was
told to stop) before it is abandoned: the run ends without it, its result is dropped."""
_CHECK_S = 0.05


class Abandoned(Exception):
    """The run was interrupted and the call did not return within its grace: left behind."""


def result_unless_interrupted(
    future: Future[T], interruption: threading.Event, grace_s: float = ABANDON_GRACE_S
) -> T:
    """``future``'s result (or its exception); ``Abandoned`` when ``interruption`` is set and
    the future is not done ``grace_s`` later. The thread computing it is not stopped: it ends
    on its own, and what it returns is dropped."""
    interrupted_at: float | None = None
    while True:
        try:
            return future.result(timeout=_CHECK_S)
        except FutureTimeout:
            pass
        if interruption.is_set():
            now = time.monotonic()
            interrupted_at = interrupted_at if interrupted_at is not None else now
            if now - interrupted_at >= grace_s:
                raise Abandoned()


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
