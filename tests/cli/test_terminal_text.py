"""Anyone's text on the terminal (issue 22, item 9): a tool's escape sequences are shown as
marks, never sent, by the one function ``visible``, in the live view and in ``treadle log``."""

from __future__ import annotations

import io

from rich.console import Console

from treadle.cli.live_view import describe, render
from treadle.cli.terminal_text import visible
from treadle.events.model import ObservationEvent
from treadle.store.base import StoredEvent

OSC_52 = "\x1b]52;c;aGFja2Vk\x07"  # set the clipboard to "hacked"
OSC_0 = "\x1b]0;owned\x1b\\"  # the window title, ended by ST
CSI = "\x1b[2J\x1b[H\x1b[31m"  # clear the screen, home, red
C1_CSI = "\x9b1A"  # cursor up, as one C1 byte
OTHERS = "bell\x07 back\x08 cr\r del\x7f nul\x00"


def test_every_control_becomes_a_visible_mark() -> None:
    shown = visible(OSC_52 + OSC_0 + CSI + C1_CSI + OTHERS)
    assert shown == ("␛]52;c;aGFja2Vk␇␛]0;owned␛\\␛[2J␛[H␛[31m\\x9b1Abell␇ back␈ cr␍ del␡ nul␀")
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)


def test_newline_tab_and_other_text_stay_as_they_are() -> None:
    text = "line 1\n\tindented ünïcode ✓ [bold]not markup[/]"
    assert visible(text) == text


def _observation(content: str) -> StoredEvent:
    event = ObservationEvent(
        action_id="a1", tool_call_id="c1", tool_name="terminal", content=content
    )
    return StoredEvent(seq=3, event=event)


def test_the_live_view_line_of_a_tool_result_sends_no_escape_sequence() -> None:
    hostile = f"out {OSC_52}{OSC_0}{CSI}{C1_CSI} end"
    assert "\x1b" not in describe(_observation(hostile).event)
    console = Console(file=io.StringIO(), width=300, force_terminal=True, color_system="truecolor")
    console.print(render(_observation(hostile)))
    written = console.file.getvalue()  # type: ignore[attr-defined]
    # Rich's own styles are escape sequences too: none of the tool's may be among them.
    for sequence in ("\x1b]52", "\x1b]0;", "\x1b[2J", "\x1b[H", "\x9b"):
        assert sequence not in written
    assert "␛]52;c;aGFja2Vk␇" in written
