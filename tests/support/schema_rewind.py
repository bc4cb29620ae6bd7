"""A store set back to the schema before one of its steps, as an older Treadle left it: what
the step made undone by the given statements, the recorded version the step's own. Opening it
then runs that step and every later one again (each may run again)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import psycopg

from support.postgres import POSTGRES_BASE_URL


def sqlite_back_to(path: Path, version: int, undo: Sequence[str]) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in undo:
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    finally:
        conn.close()


def postgres_back_to(url: str, version: int, undo: Sequence[str]) -> None:
    """``url``: a store URL naming its schema (``?schema=...``)."""
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(
        POSTGRES_BASE_URL, autocommit=True, options=f"-c search_path={schema}"
    ) as conn:
        for statement in undo:
            conn.execute(statement.encode())
        conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(version),))
