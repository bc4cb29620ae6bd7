"""The one rule for conversation ids, for every way in (API, CLI, import, the store itself):
an id is a URL path segment and a folder name (export), so no '/', no '..', nothing odd."""

from __future__ import annotations

import re

CONVERSATION_ID_MAX = 128
CONVERSATION_ID_RULE = (
    f"1 to {CONVERSATION_ID_MAX} characters from A-Z a-z 0-9 and . _ - : "
    "(not starting with '.' or '-')"
)
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9._:-]*")


def conversation_id_problem(conversation_id: object, *, kind: str = "conversation") -> str | None:
    """What is wrong with ``conversation_id`` under ``CONVERSATION_ID_RULE``, or None. An eval's
    id follows the same rule (``kind="eval"``): it is a URL path segment too."""
    if not isinstance(conversation_id, str):
        return f"a {kind} id must be a string, got {conversation_id!r}"
    if len(conversation_id) <= CONVERSATION_ID_MAX and _CONVERSATION_ID.fullmatch(conversation_id):
        return None
    shown = conversation_id if len(conversation_id) <= 60 else conversation_id[:60] + "..."
    bad = sorted({ch for ch in conversation_id if not _CONVERSATION_ID.fullmatch("a" + ch)})
    found = f"; it holds {', '.join(_char_name(ch) for ch in bad[:5])}" if bad else ""
    return (
        f"{kind} id {shown!r} ({len(conversation_id)} characters) is not allowed: "
        f"an id is {CONVERSATION_ID_RULE}{found}"
    )


def _char_name(ch: str) -> str:
    if ch == "\0":
        return "NUL"
    if "\ud800" <= ch <= "\udfff":
        return f"a lone surrogate U+{ord(ch):04X}"
    return repr(ch)
