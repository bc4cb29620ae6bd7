"""The one rule for conversation ids, for every way in (API, CLI, import, the store itself):
an id is a URL path segment and a folder name (export), so no '/', no '..', nothing odd."""

from __future__ import annotations

import contextlib
import hashlib
import re
import uuid

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


# -- which worker an id belongs to (``treadle serve --workers N``) ---------------------------


def slot_of(key: str, workers: int) -> int:
    """The worker (0 to ``workers`` - 1) that serves the conversation (or workspace command)
    ``key``: a stable hash of its text, a UUID read in its canonical form (the OpenHands API
    accepts a UUID in any of the forms ``uuid.UUID`` reads). Every process computes the same."""
    if workers <= 1:
        return 0
    with contextlib.suppress(ValueError):
        key = str(uuid.UUID(key))
    digest = hashlib.blake2b(key.encode("utf-8", "replace"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % workers


_born_in: tuple[int, int] = (0, 1)


def set_born_in(slot: int, workers: int) -> None:
    """Make this process's new ids (``new_id``) its own: a worker process calls it once, so a
    conversation it creates (or forks, imports) is routed back to it."""
    global _born_in
    _born_in = (slot, workers)


def new_id() -> str:
    """A new UUID (text) that belongs to this process's slot (``set_born_in``): about as many
    draws as there are workers."""
    slot, workers = _born_in
    while True:
        candidate = str(uuid.uuid4())
        if slot_of(candidate, workers) == slot:
            return candidate


def born_in() -> tuple[int, int]:
    """This process's (slot, workers): (0, 1) outside a worker."""
    return _born_in
