"""The SQLite store's text index: an FTS5 trigram index of the stored payloads, filled behind
the appends instead of inside them, and the text-filtered search pages it serves.

Why behind the appends: kept in the append's own transaction, a trigram index cost half the
durable append rate and five sixths of the fast one (each ~1 KB payload adds ~900 trigrams).
Here an append writes nothing more; the store's indexer thread (``TextIndexer``) indexes
events later, a few hundred per write transaction.

Why searches are still exact and see every event at once: each conversation has a high-water
mark (``text_marks.indexed``, kept in the file, so every process writing or reading the store
agrees on it): events with a seq below it are in the index, committed in the same transaction
as the mark. A text search asks the index about the events below the mark and scans the ones
above it (the *tail*) with the rule of an unindexed search; the index's answers are only
candidates, each checked again with that rule, so a search returns exactly what a scan of the
whole log would, with no lag. When a search meets a tail longer than ``TAIL_TO_INDEX`` events
it asks the indexer to catch that conversation up, so the scanned part stays short.

The index (``events_text``) is contentless (it keeps no copy of the payloads), has
``detail=none`` (no positions: a quarter of the size and twice the indexing speed of
``detail=full``; a needle is looked up as the AND of its trigrams and rechecked) and
``columnsize=0`` (no per-row sizes: they serve only ranking, 7% of the index). Its rowid
is ``conversation key << 36 | seq``, so one conversation is one rowid range, read in seq
order. Only needles the index can answer exactly use it: ASCII needles of 3 characters or
more (SQLite's ``lower()`` folds ASCII only; FTS5 folds case for ASCII the same way, so every
event the scan matches holds the needle's trigrams). Shorter or non-ASCII needles are scanned.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

ROWID_SHIFT = 36
"""rowid = key << 36 | seq: room for 2**36 events per conversation and 2**27 conversations."""
CHUNK = 256
"""Events indexed per write transaction: ~25 ms of the write lock on this machine, so an
append of another thread or process waits at most about that long behind the indexer."""
TAIL_TO_INDEX = 256
"""A search that scans more un-indexed events than this asks the indexer to catch up."""
DUTY = 0.25
"""The indexer holds the write lock at most this share of the time while it catches up (it
rests as long as a chunk took, times (1 - DUTY) / DUTY), so appends of other threads and
processes keep at least the rest."""
MIN_NEEDLE = 3

logger = logging.getLogger(__name__)


def create_text_index(conn: sqlite3.Connection) -> None:
    """The text index's tables (schema migration: its own step, nothing else in it). Existing
    events are not indexed here (that could take minutes on a large store); the indexer
    catches them up after the first searches, which scan them meanwhile. Running it again
    (a store whose recorded version was set back) keeps the index and marks as they are."""
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS events_text USING fts5("
        "body, tokenize='trigram', content='', detail='none', columnsize=0)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS text_marks "
        "(conversation INTEGER PRIMARY KEY, indexed INTEGER NOT NULL)"
    )


def indexable(needle: str) -> bool:
    """Whether a (lower-cased) needle is answered by the index: ASCII, at least 3 characters."""
    return len(needle) >= MIN_NEEDLE and needle.isascii()


def match_expression(needle: str) -> str:
    """The FTS5 query for an indexable needle: the AND of trigrams covering it (every third
    one and the last: fewer doclists to read, the same candidates give or take a few)."""
    starts = sorted({*range(0, len(needle) - 2, 3), len(needle) - 3})
    return " AND ".join('"' + needle[i : i + 3].replace('"', '""') + '"' for i in starts)


def indexed_count(conn: sqlite3.Connection, key: int) -> int:
    """How many of the conversation's events (seqs 0 .. n-1) are in the text index."""
    row = conn.execute("SELECT indexed FROM text_marks WHERE conversation = ?", (key,)).fetchone()
    return 0 if row is None else int(row[0])


def index_chunk(conn: sqlite3.Connection, key: int, chunk: int = CHUNK) -> int:
    """Index up to ``chunk`` events after the mark (inside the caller's write transaction);
    returns how many events are left un-indexed."""
    row = conn.execute("SELECT event_count FROM conversations WHERE key = ?", (key,)).fetchone()
    if row is None:
        return 0  # deleted meanwhile: nothing to index, and no mark to leave behind
    event_count = int(row[0])
    start = indexed_count(conn, key)
    end = min(event_count, start + chunk)
    if end <= start:
        return 0
    conn.execute(
        "INSERT INTO events_text (rowid, body) SELECT (?1 << 36) + seq, payload FROM events "
        "WHERE conversation = ?1 AND seq >= ?2 AND seq < ?3",
        (key, start, end),
    )
    conn.execute(
        "INSERT INTO text_marks (conversation, indexed) VALUES (?, ?) "
        "ON CONFLICT (conversation) DO UPDATE SET indexed = excluded.indexed",
        (key, end),
    )
    return event_count - end


def drop_conversation(conn: sqlite3.Connection, key: int) -> None:
    """Remove a conversation's rows from the index (before its events are deleted: a
    contentless FTS5 table forgets a row only when given the text it indexed)."""
    conn.execute(
        "INSERT INTO events_text (events_text, rowid, body) "
        "SELECT 'delete', (?1 << 36) + seq, payload FROM events "
        "WHERE conversation = ?1 AND seq < ?2",
        (key, indexed_count(conn, key)),
    )
    conn.execute("DELETE FROM text_marks WHERE conversation = ?", (key,))


def index_rows(
    conn: sqlite3.Connection,
    key: int,
    needle: str,
    low: int,
    high: int,
    conditions: str,
    params: list[Any],
    order: str,
    limit: int,
) -> list[tuple[int, str]]:
    """(seq, payload) of the indexed events with ``low < seq < high`` whose payload holds the
    needle's trigrams and meets ``conditions`` (which recheck the text), in ``order``. The
    index drives: candidates are read in rowid (= seq) order and stop at ``limit``."""
    base = key << ROWID_SHIFT
    return conn.execute(
        "SELECT e.seq, e.payload FROM events_text AS t CROSS JOIN events AS e "
        "ON e.conversation = ? AND e.seq = t.rowid - ? "
        f"WHERE events_text MATCH ? AND t.rowid > ? AND t.rowid < ?{conditions} "
        f"ORDER BY t.rowid {order} LIMIT ?",
        (key, base, match_expression(needle), base + low, base + high, *params, limit),
    ).fetchall()


def candidates(
    conn: sqlite3.Connection, key: int, needle: str, indexed: int, most: int = 5000
) -> int:
    """How many indexed events of the conversation hold the needle's trigrams, counting to
    ``most`` + 1 at most (reads only the index)."""
    base = key << ROWID_SHIFT
    return int(
        conn.execute(
            "SELECT count(*) FROM (SELECT rowid FROM events_text WHERE events_text MATCH ? "
            "AND rowid >= ? AND rowid < ? LIMIT ?)",
            (match_expression(needle), base, base + indexed, most + 1),
        ).fetchone()[0]
    )


def index_count(
    conn: sqlite3.Connection,
    key: int,
    needle: str,
    low: int,
    high: int,
    conditions: str,
    params: list[Any],
) -> int:
    """How many indexed events with ``low < seq < high`` meet ``conditions``."""
    base = key << ROWID_SHIFT
    return int(
        conn.execute(
            "SELECT count(*) FROM events_text AS t CROSS JOIN events AS e "
            "ON e.conversation = ? AND e.seq = t.rowid - ? "
            f"WHERE events_text MATCH ? AND t.rowid > ? AND t.rowid < ?{conditions}",
            (key, base, match_expression(needle), base + low, base + high, *params),
        ).fetchone()[0]
    )


class TextIndexer:
    """The store's background indexer: a thread, started at the first ``request`` and ended
    by ``stop`` (the store's ``close``), that catches up the conversations asked for, one
    chunk per call of ``index`` (a write transaction of the store), in turn."""

    def __init__(self, index: Callable[[int], int], name: str) -> None:
        self._index = index
        self._name = name
        self._cond = threading.Condition()
        self._pending: dict[int, None] = {}  # insertion-ordered set: conversations in turn
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._busy = False

    def request(self, key: int) -> None:
        """Ask for conversation ``key`` to be caught up (no-op once stopping)."""
        with self._cond:
            if self._stopping:
                return
            self._pending[key] = None
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def idle(self) -> bool:
        """Whether nothing is asked for or being indexed (tests wait for it)."""
        with self._cond:
            return not self._pending and not self._busy

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """End the thread (after the chunk it is indexing) and wait for it."""
        with self._cond:
            self._stopping = True
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        rest = 0.0
        while True:
            with self._cond:
                if rest > 0:
                    self._cond.wait_for(lambda: self._stopping, timeout=rest)
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                key = next(iter(self._pending))
                del self._pending[key]
                self._busy = True
            left = 0
            begin = time.monotonic()
            try:
                left = self._index(key)
            except Exception as error:  # a busy or removed file: searches scan meanwhile
                logger.warning("text index of conversation key %s not caught up: %s", key, error)
            finally:
                rest = (time.monotonic() - begin) * (1 - DUTY) / DUTY
                with self._cond:
                    self._busy = False
                    if left > 0 and not self._stopping:
                        self._pending[key] = None  # back of the queue: others get a turn


__all__ = [
    "CHUNK",
    "TAIL_TO_INDEX",
    "TextIndexer",
    "candidates",
    "create_text_index",
    "drop_conversation",
    "index_chunk",
    "index_count",
    "index_rows",
    "indexable",
    "indexed_count",
]
