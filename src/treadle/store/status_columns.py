"""The status each conversation's log records last, kept in the conversation's row by the
append that stores it, in its transaction: a list of conversations (and every ``read_status``)
reads it with the row instead of searching the log for it.

The row says what a search of the log would: the ``status`` fact (``data.status``) with the
highest seq, on any branch, or none (IDLE). One self-contained schema step per backend
(``sqlite_add_status_columns``, ``postgres_add_status_columns``): two columns on
``conversations``, filled once from the status events already stored (only those events are
decoded).

Measured: 200 conversations listed every 0.5 s while they ran took ~20% of the server's CPU
when each item's status was a search of its log (``treadle bench server``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from treadle.data.status import status_from_event
from treadle.events.model import Event, StateChangeEvent, event_from_json

if TYPE_CHECKING:  # the SQLite store imports this module: psycopg only when it is used
    import psycopg

STATUS_COLUMNS = "status, status_reason"
"""The conversations columns, in ``ConversationInfo``'s order."""
STATUS_UPDATE = (
    "status = coalesce({0}, status), "
    "status_reason = CASE WHEN {0} IS NULL THEN status_reason ELSE {0} END"
)
"""The append's addition to its UPDATE of the conversation row (``{0}``: the placeholder; its
parameters are ``status_params``). A batch without a status leaves both as they are."""
STATUS_TEXT = '"key":"status"'
"""How a status fact shows in an event's stored JSON (compact): the migration decodes only
the state changes whose payload has it."""


def last_status(events: Iterable[Event]) -> tuple[str, str | None] | None:
    """The (status, reason) the last status fact among ``events`` records; None when none
    does."""
    found = None
    for event in events:
        if isinstance(event, StateChangeEvent) and (status := status_from_event(event)):
            found = status[0].value, status[1]
    return found


def status_params(events: Sequence[Event]) -> tuple[str | None, str | None, str | None]:
    """``STATUS_UPDATE``'s parameters for an append of ``events``."""
    found = last_status(events)
    if found is None:
        return None, None, None
    return found[0], found[0], found[1]


def _statuses(payloads: Iterable[tuple[Any, str]]) -> dict[Any, tuple[str, str | None]]:
    """The last status by conversation key from (key, payload) rows in seq order (one event
    decoded at a time: a large store is never held in memory)."""
    found: dict[Any, tuple[str, str | None]] = {}
    for key, payload in payloads:
        status = last_status([event_from_json(payload)])
        if status is not None:
            found[key] = status
    return found


def sqlite_add_status_columns(conn: sqlite3.Connection) -> None:
    """SQLite schema step: the columns, and the status of the logs already stored (again
    when it runs again: a step re-run on a store rolled back to an older version)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(conversations)")}
    for column in ("status", "status_reason"):
        if column not in columns:
            conn.execute(f"ALTER TABLE conversations ADD COLUMN {column} TEXT")
    rows = conn.execute(
        "SELECT conversation, payload FROM events WHERE kind = 'state_change' "
        "AND instr(payload, ?) > 0 ORDER BY conversation, seq",
        (STATUS_TEXT,),
    )
    conn.executemany(
        "UPDATE conversations SET status = ?, status_reason = ? WHERE key = ?",
        [(status, reason, key) for key, (status, reason) in _statuses(rows).items()],
    )


def postgres_add_status_columns(conn: psycopg.Connection[Any]) -> None:
    """PostgreSQL schema step: the columns, and the status of the logs already stored (again
    when it runs again)."""
    conn.execute(
        "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS status text, "
        "ADD COLUMN IF NOT EXISTS status_reason text"
    )
    with conn.cursor(name="status_columns") as rows:  # server-side: read in pieces
        rows.execute(
            "SELECT conversation, payload FROM events WHERE kind = 'state_change' "
            "AND strpos(payload, %s) > 0 ORDER BY conversation, seq",
            (STATUS_TEXT,),
        )
        statuses = _statuses(rows)
    with conn.cursor() as cursor:
        cursor.executemany(
            "UPDATE conversations SET status = %s, status_reason = %s WHERE key = %s",
            [(status, reason, key) for key, (status, reason) in statuses.items()],
        )


__all__ = [
    "STATUS_COLUMNS",
    "STATUS_UPDATE",
    "last_status",
    "postgres_add_status_columns",
    "sqlite_add_status_columns",
    "status_params",
]
