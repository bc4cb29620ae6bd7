"""The eval tables' schema step, one per backend (``sqlite_add_eval_tables``,
``postgres_add_eval_tables``): the store's own migrations make them, and the store's
``schema_version`` covers them.

``eval_runs``: one row per eval. ``eval_tasks``: one row per task, epoch and eval (its state,
attempts, the conversation of its last attempt, its result as JSON). Plain SQL both backends
take; timestamps are ISO 8601 text in UTC, which sorts as it reads.

Before this step existed the eval layer made the same tables itself, on first use, with its
own version (``eval_schema_version`` in ``meta``: 1 before epochs and the inputs digest, 2
after). A store it touched keeps its tables and rows: the step upgrades them from the version
it finds and drops that key, so one version, the store's, says what the file holds.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from treadle.store.base import StoreError

if TYPE_CHECKING:  # the SQLite store imports this module: psycopg only when it is used
    import psycopg

EVAL_TABLES = (
    """CREATE TABLE IF NOT EXISTS eval_runs (
        id TEXT PRIMARY KEY,
        tasks_file TEXT NOT NULL,
        tasks_sha256 TEXT NOT NULL,
        settings TEXT NOT NULL,
        engine TEXT NOT NULL,
        task_ids TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        inputs_sha256 TEXT NOT NULL DEFAULT ''
    )""",
    """CREATE TABLE IF NOT EXISTS eval_tasks (
        eval_id TEXT NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
        task_id TEXT NOT NULL,
        epoch INTEGER NOT NULL DEFAULT 1,
        position INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'done', 'not_run')),
        attempts INTEGER NOT NULL,
        conversation_id TEXT,
        passed INTEGER NOT NULL,
        result TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (eval_id, task_id, epoch)
    )""",
    "CREATE INDEX IF NOT EXISTS eval_tasks_by_conversation ON eval_tasks (conversation_id)",
)
"""The tables as a store without them gets them. IF NOT EXISTS: like the text index step,
this one may run again on a store that has them (a store whose version was set back to
redo an earlier step) and leaves them as they are."""

_OLD_VERSION_KEY = "eval_schema_version"
"""Where the eval layer that kept its own tables wrote their version."""

_OLD_1_TO_CURRENT = (
    "ALTER TABLE eval_runs ADD COLUMN inputs_sha256 TEXT NOT NULL DEFAULT ''",
    """CREATE TABLE eval_tasks_v2 (
        eval_id TEXT NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
        task_id TEXT NOT NULL,
        epoch INTEGER NOT NULL DEFAULT 1,
        position INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'done', 'not_run')),
        attempts INTEGER NOT NULL,
        conversation_id TEXT,
        passed INTEGER NOT NULL,
        result TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (eval_id, task_id, epoch)
    )""",
    "INSERT INTO eval_tasks_v2 (eval_id, task_id, epoch, position, state, attempts, "
    "conversation_id, passed, result, updated_at) SELECT eval_id, task_id, 1, position, state, "
    "attempts, conversation_id, passed, result, updated_at FROM eval_tasks",
    "DROP TABLE eval_tasks",
    "ALTER TABLE eval_tasks_v2 RENAME TO eval_tasks",
    "CREATE INDEX eval_tasks_by_conversation ON eval_tasks (conversation_id)",
)
"""Old eval version 1 to the current tables: one row per task and epoch, and the inputs
digest. A table rebuild, as SQLite cannot change a primary key in place."""


def _statements(old_version: str | None) -> tuple[str, ...]:
    """What brings the eval tables to their current shape, from the version the old eval
    layer left in ``meta`` (None: it never ran, there are no eval tables)."""
    if old_version is None:
        return EVAL_TABLES
    if old_version == "1":
        return _OLD_1_TO_CURRENT
    if old_version == "2":
        return ()  # the shape of EVAL_TABLES already
    raise StoreError(
        f"this store's eval tables are of an eval schema version this Treadle does not know "
        f"({_OLD_VERSION_KEY} {old_version!r} in meta; it knows 1 and 2); open the store with "
        "the Treadle that wrote them (nothing was changed)"
    )


def sqlite_add_eval_tables(conn: sqlite3.Connection) -> None:
    """SQLite schema step: the eval tables, or the old eval layer's brought up to date."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_OLD_VERSION_KEY,)).fetchone()
    for statement in _statements(None if row is None else str(row[0])):
        conn.execute(statement)
    conn.execute("DELETE FROM meta WHERE key = ?", (_OLD_VERSION_KEY,))


def postgres_add_eval_tables(conn: psycopg.Connection[Any]) -> None:
    """PostgreSQL schema step: the eval tables, or the old eval layer's brought up to date."""
    row = conn.execute("SELECT value FROM meta WHERE key = %s", (_OLD_VERSION_KEY,)).fetchone()
    for statement in _statements(None if row is None else str(row[0])):
        conn.execute(statement)
    conn.execute("DELETE FROM meta WHERE key = %s", (_OLD_VERSION_KEY,))


__all__ = ["EVAL_TABLES", "postgres_add_eval_tables", "sqlite_add_eval_tables"]
