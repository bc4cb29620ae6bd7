"""What the command line prints of anyone's text (a tool's output, a model's answer, an id, a
title): every control character a terminal would act on made visible, never sent.

A command in the sandbox can print ``ESC ] 52 ; c ; … BEL`` (set the user's clipboard), ``ESC ] 0
; … BEL`` (the window title) or any CSI sequence (move the cursor, rewrite lines above); shown
raw, the user's terminal would obey. ``visible`` is the one place that turns them into marks.
"""

from __future__ import annotations

import re

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 controls but newline and tab, DEL, and the C1 controls (0x9b is a one-byte CSI)."""


def _mark(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the control pictures: ESC -> ␛, BEL -> ␇, CR -> ␍
    if code == 0x7F:
        return "␡"
    return f"\\x{code:02x}"  # C1 has no pictures


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab shown as a visible mark
    (``\\x1b`` as ``␛``, C1 controls as ``\\x9b``); everything else unchanged."""
    return _CONTROLS.sub(_mark, text)
