"""Recorded conversations for the replay tests: made by really running the scripted agent with
the real tools, tampered copies of them (a log from elsewhere), and the raw rows of one
conversation (to show a replay leaves the original byte for byte as it was)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from treadle.events.model import Event, StateChangeEvent
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus
from treadle.store.base import EventStore


def call(name: str, arguments: dict[str, Any] | str, id: str | None = None) -> dict[str, Any]:
    made: dict[str, Any] = {"name": name, "arguments": arguments}
    if id is not None:
        made["id"] = id
    return made


def calls(*made: dict[str, Any], text: str = "") -> dict[str, Any]:
    """One response with these calls (several: parallel calls of one response)."""
    return {"text": text, "tool_calls": list(made)}


def bash(command: str) -> dict[str, Any]:
    return calls(call("terminal", {"command": command}))


FINISH = calls(call("finish", {"message": "done"}))


def recorded(
    store: EventStore,
    workspace: Path,
    responses: Sequence[dict[str, Any]],
    *,
    messages: Sequence[str] = ("go",),
    summaries: Sequence[str] = (),
    decide: Callable[[Conversation], None] | None = None,
    **fields: Any,
) -> str:
    """A conversation run to its end: each message sent, then run; while it waits for a
    confirmation, ``decide`` answers (confirms or rejects) and it runs on. Its id."""
    settings = ConversationSettings.scripted_inline(responses, workspace, **fields)
    if summaries:
        model = settings.model.model_copy(update={"summaries": tuple(summaries)})
        settings = settings.model_copy(update={"model": model})
    with Conversation.create(store, settings) as conversation:
        for text in messages:
            conversation.send_message(text)
            status = conversation.run()
            while status is ConversationStatus.WAITING_FOR_CONFIRMATION:
                assert decide is not None, "the conversation waits for a confirmation"
                decide(conversation)
                status = conversation.run()
        return conversation.id


def copy_with(
    store: EventStore, conversation_id: str, change: Callable[[list[Event]], list[Event]]
) -> str:
    """A new conversation holding ``change``(the path) and the facts beside it, with the
    original's settings, as a log written elsewhere and brought in would be: ``change`` may
    alter or drop events (re-link the event after a dropped one)."""
    info = store.get_conversation(conversation_id)
    path = store.path_to_root(conversation_id, store.head(conversation_id) or "")
    copy = store.create_conversation(title="tampered", metadata=dict(info.metadata))
    changed = change(list(path))
    store.append_batch(copy.id, changed)
    kept = {event.id for event in changed}
    facts = [
        stored.event
        for stored in store.get_range(conversation_id, 0, 10**9)
        if isinstance(stored.event, StateChangeEvent) and stored.event.parent_id in kept
    ]
    if facts:
        store.append_batch(copy.id, facts, move_head=False)
    return copy.id


def without(path: list[Event], index: int) -> list[Event]:
    """``path`` without its ``index``-th event, the next one linked to the one before."""
    dropped = path[index]
    rest = path[:index] + path[index + 1 :]
    if index < len(rest):
        rest[index] = rest[index].model_copy(update={"parent_id": dropped.parent_id})
    return rest


def raw_rows(database: Path, conversation_id: str) -> list[tuple[Any, ...]]:
    """The conversation's row and its events' rows, as SQLite holds them."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        (row,) = connection.execute(
            "SELECT * FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchall()
        events = connection.execute(
            "SELECT * FROM events WHERE conversation = ? ORDER BY seq", (row[0],)
        ).fetchall()
    connection.close()
    return [row, *events]
