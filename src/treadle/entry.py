"""The ``treadle`` program's first code: SIGINT and SIGTERM that arrive while the command line
starts (importing its modules, opening the store) end it cleanly, with one line and exit code
128 + the signal's number (130, 143), never a traceback or a death by signal. A command that
runs an agent installs its own handlers once it has something to close (``treadle run``:
the run records its stop, exit 3)."""

from __future__ import annotations

import signal
import sys
from types import FrameType


def _stop(number: int, _frame: FrameType | None) -> None:
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_IGN)  # a second signal does not cut the exit short
    name = signal.Signals(number).name
    sys.stderr.write(f"treadle: stopped by {name}\n")
    raise SystemExit(128 + number)


def install_startup_signals() -> None:
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _stop)


def main() -> None:
    install_startup_signals()
    from treadle.cli import main as cli_main  # imported after: a signal now exits cleanly

    cli_main()
