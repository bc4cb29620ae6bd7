"""Running usage totals per conversation (tokens and cost of every model call in its log),
kept in the conversation's row by the append that stores the events, in its transaction: a
list of conversations reads them with the rows, never from the events.

One self-contained schema step per backend (``sqlite_add_usage_totals``,
``postgres_add_usage_totals``): three columns on ``conversations``, filled once from the
events already stored (only the events whose JSON records a usage are decoded)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from treadle.events.model import Event, event_from_json
from treadle.events.usage import UsageTotals, usage_of, usage_totals_of

if TYPE_CHECKING:  # the SQLite store imports this module: psycopg only when it is used
    import psycopg

USAGE_COLUMNS = "prompt_tokens, completion_tokens, cost_usd"
"""The conversations columns, in ``ConversationInfo``'s order."""
USAGE_UPDATE = (
    "prompt_tokens = prompt_tokens + {0}, completion_tokens = completion_tokens + {0}, "
    "cost_usd = cost_usd + {0}"
)
"""The append's addition to its UPDATE of the conversation row (``{0}``: the placeholder)."""
USAGE_TEXT = '"usage":{'
"""How a recorded usage shows in an event's stored JSON (compact, ``None`` left out): the
migration decodes only the events whose payload has it."""


def batch_usage(events: Sequence[Event]) -> tuple[int, int, float]:
    """What an append adds to its conversation's totals."""
    totals = usage_totals_of(events)
    return totals.prompt_tokens, totals.completion_tokens, totals.cost_usd


def _totals(payloads: Iterable[tuple[Any, str]]) -> dict[Any, UsageTotals]:
    """Totals by conversation key from (key, payload) rows in seq order (one event decoded
    at a time: a large store is never held in memory)."""
    found: dict[Any, UsageTotals] = {}
    for key, payload in payloads:
        usage = usage_of(event_from_json(payload))
        if usage is not None:
            was = found.get(key, UsageTotals())
            found[key] = UsageTotals(
                was.prompt_tokens + usage.prompt_tokens,
                was.completion_tokens + usage.completion_tokens,
                was.cost_usd + usage.cost_usd,
            )
    return found


def sqlite_add_usage_totals(conn: sqlite3.Connection) -> None:
    """SQLite schema step: the columns, and the totals of the logs already stored."""
    conn.execute("ALTER TABLE conversations ADD COLUMN prompt_tokens INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "ALTER TABLE conversations ADD COLUMN completion_tokens INTEGER NOT NULL DEFAULT 0"
    )
    conn.execute("ALTER TABLE conversations ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0")
    rows = conn.execute(
        "SELECT conversation, payload FROM events WHERE kind IN ('action', 'message') "
        "AND instr(payload, ?) > 0 ORDER BY conversation, seq",
        (USAGE_TEXT,),
    )
    conn.executemany(
        "UPDATE conversations SET prompt_tokens = ?, completion_tokens = ?, cost_usd = ? "
        "WHERE key = ?",
        [
            (totals.prompt_tokens, totals.completion_tokens, totals.cost_usd, key)
            for key, totals in _totals(rows).items()
        ],
    )


def postgres_add_usage_totals(conn: psycopg.Connection[Any]) -> None:
    """PostgreSQL schema step: the columns, and the totals of the logs already stored."""
    conn.execute(
        "ALTER TABLE conversations ADD COLUMN prompt_tokens bigint NOT NULL DEFAULT 0, "
        "ADD COLUMN completion_tokens bigint NOT NULL DEFAULT 0, "
        "ADD COLUMN cost_usd double precision NOT NULL DEFAULT 0"
    )
    with conn.cursor(name="usage_totals") as rows:  # server-side: read in pieces
        rows.execute(
            "SELECT conversation, payload FROM events WHERE kind IN ('action', 'message') "
            "AND strpos(payload, %s) > 0 ORDER BY conversation, seq",
            (USAGE_TEXT,),
        )
        totals = _totals(rows)
    with conn.cursor() as cursor:
        cursor.executemany(
            "UPDATE conversations SET prompt_tokens = %s, completion_tokens = %s, "
            "cost_usd = %s WHERE key = %s",
            [
                (total.prompt_tokens, total.completion_tokens, total.cost_usd, key)
                for key, total in totals.items()
            ],
        )


__all__ = [
    "USAGE_COLUMNS",
    "USAGE_UPDATE",
    "batch_usage",
    "postgres_add_usage_totals",
    "sqlite_add_usage_totals",
]
