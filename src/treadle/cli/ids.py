"""Ids as people type and read them: every command that takes a conversation, event, snapshot or
eval id takes a unique prefix of it, and tables show each id as its shortest unique prefix.

The rules (as ``git`` and ``gh`` have them): an exact id always wins; a prefix needs at least
``MIN_PREFIX`` characters (an eval's ``eval-`` not counted) and must name one id, else it is
refused listing the candidates. A table shows the shortest prefix of at least ``SHORT_ID``
characters that no other id of the same kind starts with, whole, never cut with an ellipsis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from treadle.cli.output import EXIT_BAD_INPUT, fail

if TYPE_CHECKING:
    from treadle.store.base import EventStore

MIN_PREFIX = 4
SHORT_ID = 8
EVAL_PREFIX = "eval-"
SHOWN_CANDIDATES = 10
"""How many candidates an ambiguous prefix's error lists (then how many more)."""


def _core(identifier: str) -> tuple[str, str]:
    """(``eval-`` or nothing, the rest): the prefix an eval id starts with is not counted."""
    if identifier.startswith(EVAL_PREFIX):
        return EVAL_PREFIX, identifier[len(EVAL_PREFIX) :]
    return "", identifier


def short_ids(ids: Iterable[str], universe: Iterable[str] = ()) -> dict[str, str]:
    """Each of ``ids`` -> its shortest prefix of at least ``SHORT_ID`` characters (``eval-``
    not counted) that no other id of ``ids`` or ``universe`` starts with; the whole id when
    none is shorter (an id that is the prefix of another is named exactly)."""
    wanted = list(dict.fromkeys(ids))
    every = sorted({*wanted, *universe})
    place = {identifier: position for position, identifier in enumerate(every)}
    shown: dict[str, str] = {}
    for identifier in wanted:
        position = place[identifier]
        shared = 0  # the longest prefix it shares with a neighbour in sorted order
        for other in every[max(position - 1, 0) : position + 2]:
            if other != identifier:
                shared = max(shared, _common_length(identifier, other))
        lead, _rest = _core(identifier)
        shown[identifier] = identifier[: max(shared + 1, len(lead) + SHORT_ID)]
    return shown


def _common_length(one: str, other: str) -> int:
    length = 0
    for left, right in zip(one, other, strict=False):
        if left != right:
            break
        length += 1
    return length


def resolve(
    text: str, candidates: Iterable[str], kind: str, where: str, *, contract: str = ""
) -> str:
    """The one id of ``candidates`` that ``text`` names (the id itself, or a unique prefix of
    at least ``MIN_PREFIX`` characters); exits 2 naming the problem and the candidates
    (``contract``: the contract name the error starts with, e.g. TREE-HEAD)."""
    every = list(candidates)
    said = f"{contract}: " if contract else ""
    if text in every:
        return text
    lead, rest = _core(text)
    if len(rest) < MIN_PREFIX:
        fail(
            f"{said}no {kind} {text!r} in {where}; a prefix needs at least {MIN_PREFIX} characters"
            + (f" after {EVAL_PREFIX!r}" if lead else ""),
            EXIT_BAD_INPUT,
        )
    matches = sorted(
        candidate
        for candidate in every
        if candidate.startswith(text) or (not lead and candidate.startswith(EVAL_PREFIX + text))
    )
    if len(matches) == 1:
        return matches[0]
    if not matches:
        fail(f"{said}no {kind} {text!r} in {where}", EXIT_BAD_INPUT)
    listed = ", ".join(matches[:SHOWN_CANDIDATES])
    more = f" and {len(matches) - SHOWN_CANDIDATES} more" if len(matches) > SHOWN_CANDIDATES else ""
    fail(
        f"{said}{kind} prefix {text!r} is ambiguous in {where}: it starts {listed}{more}; "
        "give more characters",
        EXIT_BAD_INPUT,
    )


def conversation_ids(store: EventStore) -> list[str]:
    """Every stored conversation's id."""
    from treadle.cli.store_commands import all_conversations

    return [info.id for info in all_conversations(store)]


def resolve_conversation(store: EventStore, text: str) -> str:
    """The stored conversation ``text`` names (an id or a unique prefix); exits 2 otherwise."""
    from treadle.store.base import ConversationNotFound, StoreError

    try:
        store.get_conversation(text)
        return text  # an exact id wins, without reading the list
    except ConversationNotFound:
        pass
    except (StoreError, ValueError):  # e.g. a string no id can be: try it as a prefix
        pass
    try:
        every = conversation_ids(store)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    return resolve(text, every, "conversation", f"store {store.url}")


def resolve_event(store: EventStore, conversation: str, text: str, *, contract: str = "") -> str:
    """The event of ``conversation`` that ``text`` names (an id or a unique prefix)."""
    from treadle.store.base import EventNotFound, StoreError

    try:
        store.get_event(conversation, text)
        return text
    except EventNotFound:
        pass
    except (StoreError, ValueError):
        pass
    try:
        every = [shape.id for shape in store.shapes(conversation)]
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    return resolve(text, every, "event", f"conversation {conversation}", contract=contract)
