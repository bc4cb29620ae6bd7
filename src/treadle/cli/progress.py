"""Progress of a long command on a terminal: what it is doing, how far (count, rate, time
left when the total is known), on stderr, gone when it ends. Nothing at all when stderr is
not a terminal (a pipe, a file, a test): output stays what the command prints."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress


class Phases:
    """One line per phase (``start``), advanced by ``advance``; a no-op off a terminal."""

    def __init__(self, bar: Progress | None) -> None:
        self._bar = bar
        self._task: Any = None

    def start(self, description: str, total: int | None = None) -> None:
        """A new phase: ``total`` items (None: unknown, a spinner and the time spent)."""
        if self._bar is None:
            return
        if self._task is not None:
            self._bar.update(self._task, visible=False)
        self._task = self._bar.add_task(description, total=total)

    def advance(self, items: int = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, items)


@contextmanager
def phases() -> Iterator[Phases]:
    """``Phases`` drawn on stderr while the block runs, when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield Phases(None)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _rate_column(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        yield Phases(bar)


def _rate_column() -> Any:
    """A column of items a second (rich is imported only when a bar is drawn)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Items a second, once there is a rate."""

        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.0f}/s")

    return RateColumn()
