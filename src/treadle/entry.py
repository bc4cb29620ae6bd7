"""The ``treadle`` program's first code: SIGINT and SIGTERM that arrive while the command line
starts (importing its modules, opening the store) end it cleanly, with one line and exit code
128 + the signal's number (130, 143), never a traceback or a death by signal. A command that
runs an agent installs its own handlers once it has something to close (``treadle run``:
the run records its stop, exit 3).

Python runs a signal handler wherever the main thread is, and an exception raised where Python
cannot pass it on (a weak reference's callback, e.g. importlib's module locks) is only printed
as "Exception ignored" with its traceback, and the program goes on. The stop is remembered, so
that such a swallowed stop still ends the program with its code, without the traceback."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

_stopped_by: int | None = None
"""The signal that stopped the program, once one did."""


def _stop(number: int, _frame: FrameType | None) -> None:
    global _stopped_by
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_IGN)  # a second signal does not cut the exit short
    _stopped_by = number
    name = signal.Signals(number).name
    sys.stderr.write(f"treadle: stopped by {name}\n")
    raise SystemExit(128 + number)


def _unraisable(unraisable: Any) -> None:
    """Our stop raised where Python could not pass it on: not reported (``run`` ends the
    program with its code); anything else as Python reports it."""
    if isinstance(unraisable.exc_value, SystemExit) and _stopped_by is not None:
        return
    sys.__unraisablehook__(unraisable)


def install_startup_signals() -> None:
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _stop)
    sys.unraisablehook = _unraisable


def run(command: Callable[[], object]) -> None:
    """``command`` (the command line), ended with the stop's code when a start-up signal
    stopped it, even one Python swallowed."""
    try:
        command()
    except SystemExit:
        if _stopped_by is not None:
            raise SystemExit(128 + _stopped_by) from None
        raise
    if _stopped_by is not None:
        raise SystemExit(128 + _stopped_by)


def main() -> None:
    install_startup_signals()
    from treadle.cli import main as cli_main  # imported after: a signal now exits cleanly

    run(cli_main)
