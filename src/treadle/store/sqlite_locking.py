"""Waiting for SQLite's locks held by other connections: the write lock (``BEGIN IMMEDIATE``)
in short steps rather than SQLite's own, and the moment with no other writer that setting WAL
mode needs.

SQLite's busy handler, given a timeout, sleeps 1, 2, 5, 10, 15, 20, 25 ... ms between its
tries: a writer that finds the lock taken by another process, whose commit ends a millisecond
later, sleeps on for several milliseconds more, and every append queued behind it
(``group_commit``) with it. Measured here with two server workers on one store file: each
spent 3.1-3.4 s of an 11 s run of 200 conversations in that wait, against 1.4-1.6 s in all its
commits. So the lock is asked for without SQLite's wait (``busy_timeout`` 0 for that one
statement) and asked again after 0.1 ms, doubling to at most 1 ms, until the connection's own
busy timeout has passed; then SQLite's "database is locked" is raised as before.
"""

from __future__ import annotations

import sqlite3
import time

SQLITE_BUSY = 5
FIRST_PAUSE_S = 0.0001
LONGEST_PAUSE_S = 0.001


def begin_immediate(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """``BEGIN IMMEDIATE`` on ``conn``, waiting up to ``busy_timeout_s`` for the write lock of
    another connection; ``conn``'s busy timeout (the one its other statements wait by) is
    ``busy_timeout_s`` again when this returns or raises."""
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        deadline: float | None = None
        pause = FIRST_PAUSE_S
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if getattr(error, "sqlite_errorcode", 0) & 0xFF != SQLITE_BUSY:
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + busy_timeout_s
                if now >= deadline:
                    raise
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, LONGEST_PAUSE_S)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")


def enter_wal_mode(conn: sqlite3.Connection, busy_timeout_s: float) -> str:
    """``PRAGMA journal_mode=WAL``, asked again every 10 ms while another connection holds a
    lock it needs (SQLite may not wait by itself here), for up to ``busy_timeout_s``; the
    journal mode the file is in after it (``wal`` unless the file cannot be)."""
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
