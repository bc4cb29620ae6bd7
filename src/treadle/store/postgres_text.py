"""The PostgreSQL store's text index: a ``pg_trgm`` GIN index on the stored payloads, which
the text filter (``payload ~* '***=needle'``, see postgres_sql.filters_of) uses as it is.

PostgreSQL keeps it in the append's own transaction; a GIN index's pending list (the default
``fastupdate``) makes that an append of one list entry, merged into the index in bulk later,
and a search reads the pending list too, so a search sees every committed event. The index is
lossy: PostgreSQL rechecks each candidate row with the operator itself, so results are those
of a scan.

``pg_trgm`` is an extension of the database, not of the store's schema: it is created (in
``public``) if missing. When that is refused (no privilege, not installed on the server) the
store works without the index (text filters scan, as before) and says so in the log; the next
open of the store tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from treadle.store.base import EventQuery

logger = logging.getLogger(__name__)

INDEX = "events_text"
ORDERED_PROBE = 200
"""A text search page first reads this many events in page order (a frequent needle fills
the page there), then asks the index about the rest of its range."""
TEXT_INDEX_CAP = 2000
"""At most this many of the index's matches are read and sorted for a page; a needle with
more matches is dense enough that reading the range in page order meets the page soon."""
MIN_NEEDLE = 3
"""A shorter needle has no trigram: the index would answer "every row"."""


def uses_text_index(query: EventQuery) -> bool:
    """Whether a search with this query reads the text index (when the store has it)."""
    return query.text is not None and len(query.text) >= MIN_NEEDLE


@contextmanager
def text_index_scans(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The statements inside run in a transaction that lets the planner use the index.

    The store's sessions turn bitmap scans off (postgres_sessions.connect: the planner chose
    them, without statistics, where an ordered index scan stops at the page), and a GIN index
    is only read by a bitmap scan. Here it is the other way round: ordered index scans are
    off, so a text filter is answered from the trigram index (ANDed with the conversation's
    or the branch's index) instead of reading the conversation row by row.
    """
    with conn.transaction():
        conn.execute("SET LOCAL enable_bitmapscan = on")
        conn.execute("SET LOCAL enable_indexscan = off")
        yield


def _trgm_schema(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'pg_trgm'"
    ).fetchone()
    return None if row is None else str(row[0])


def has_text_index(conn: psycopg.Connection[Any]) -> bool:
    """Whether the schema on the connection's search path has the text index."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (INDEX,)).fetchone()
    return bool(row and row[0])


def merge_pending(conn: psycopg.Connection[Any]) -> int:
    """Merge the index's pending list into the index now (``gin_clean_pending_list``): the
    pages it held. A search reads the whole pending list row by row, so after a bulk append
    it would otherwise pay for up to ``gin_pending_list_limit`` (4 MB) of entries until
    PostgreSQL merges them (when the list fills, or at vacuum). Refused (not the index's
    owner), the list stays: searches are still exact, only slower, and the log says so."""
    try:
        with conn.transaction():
            row = conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (INDEX,)).fetchone()
    except psycopg.errors.InsufficientPrivilege as error:
        logger.warning(
            "the text index's pending list is left for PostgreSQL to merge: %s",
            str(error).strip(),
        )
        return 0
    return int(row[0]) if row is not None else 0


def ensure_text_index(conn: psycopg.Connection[Any]) -> bool:
    """Create the text index if missing (inside the caller's transaction, after the schema's
    tables exist); False, with a warning in the log, when ``pg_trgm`` cannot be had."""
    if has_text_index(conn):
        return True
    try:
        with conn.transaction():  # a savepoint: a refusal leaves the caller's work intact
            trgm = _trgm_schema(conn)
            if trgm is None:
                # one database-wide extension: stores of other schemas must not race on it
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('treadle:pg_trgm'))")
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
                trgm = _trgm_schema(conn) or "public"
            conn.execute(
                sql.SQL("CREATE INDEX {} ON events USING gin (payload {}.gin_trgm_ops)").format(
                    sql.Identifier(INDEX), sql.Identifier(trgm)
                )
            )
    except psycopg.Error as error:
        logger.warning(
            "text search in this store reads every event of a conversation: the pg_trgm "
            "extension cannot be used (%s). Ask the database's administrator to run "
            "'CREATE EXTENSION pg_trgm'; the index is made the next time the store is opened.",
            str(error).strip(),
        )
        return False
    return True


__all__ = [
    "INDEX",
    "ORDERED_PROBE",
    "TEXT_INDEX_CAP",
    "ensure_text_index",
    "has_text_index",
    "merge_pending",
    "text_index_scans",
    "uses_text_index",
]
