"""``treadle run``'s view of a command's output while it runs: each chunk's lines, dimmed and
indented under the call's line (the stored observation's line follows when it ends)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from treadle.cli.terminal_text import visible

if TYPE_CHECKING:
    from treadle.runtime.live_output import OutputChunk

GUTTER = "      │ "
"""Under the seq column of the event lines, so output so far never looks like an event."""


class LiveOutputView:
    """An ``OutputListener`` printing output so far. A line a command prints in two chunks
    shows as two lines (no line is held back waiting for its end)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._ends: dict[str, int] = {}
        """Per call: where the last chunk shown ended (a later offset is a gap)."""
        self._open_line: set[str] = set()
        """Calls whose last chunk ended inside a line."""

    def __call__(self, chunk: OutputChunk) -> None:
        action, text = chunk.action_id, chunk.text
        lines = []
        if chunk.offset > self._ends.get(chunk.action_id, 0):
            lines.append("[... earlier output not shown ...]")
        self._ends[action] = chunk.offset + len(text)
        if action in self._open_line and text.startswith("\n"):
            text = text[1:]  # the end of the line already shown
        if text.endswith("\n") or not text:
            self._open_line.discard(action)
        else:
            self._open_line.add(action)
        if text:
            lines += text.removesuffix("\n").split("\n")
        for line in lines:
            shown = visible(line.rstrip("\r"))  # escape sequences shown, never sent
            self.console.print(Text(GUTTER, style="dim") + Text(shown, style="dim"))
