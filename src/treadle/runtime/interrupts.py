"""Noticing, while a run is in progress, an interrupt the user sent to any process sharing the
store: a watcher thread per run polls the run's log for an interrupt request
(``runtime/requests.py``) and, on the first it sees, calls back once to stop the calls in
progress (the conversation then kills what its tools started).

Why polling: an interrupt may reach a server that does not run the conversation; the one that
does learns of it only through the store. ``WATCH_INTERVAL_S`` bounds how late it learns
(one indexed query per interval per running conversation).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

logger = logging.getLogger(__name__)

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
