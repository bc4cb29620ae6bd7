"""Run leases: exactly one process runs a given conversation at a time, across processes and,
on PostgreSQL, across machines. A holder renews its lease; a crashed holder's lease expires and
another process may take the conversation over (its ``run`` then closes interrupted calls).
An owner string starts with its kind (``server-…``, ``cli-…``): a server takes over only what a
server started; a CLI run that died is resumed only by someone running it again.

On PostgreSQL the lease lives beside the events, in the same database, in a table of its own;
on SQLite in a file of its own beside the store's (``sqlite_leases_path``). A lost
connection is replaced and the statement run again (each of them may be repeated safely);
a store that stays out of reach raises StoreUnavailable, except from ``release``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from treadle.store.base import StoreError, StoreUnavailable
from treadle.store.sqlite import IDS_PER_STATEMENT, sqlite_errors
from treadle.store.sqlite_locking import begin_immediate, enter_wal_mode
from treadle.store.urls import sqlite_path_and_options

logger = logging.getLogger(__name__)

LEASE_BUSY_TIMEOUT_S = 30.0
"""How long a lease write waits for the file's write lock before it fails."""

SERVER = "server"
CLI = "cli"


def new_owner(kind: str) -> str:
    """A fresh owner name of ``kind`` (SERVER, CLI): the kind is what comes before the dash."""
    return f"{kind}-{uuid.uuid4().hex[:12]}"


class RunLeases(Protocol):
    def acquire(self, conversation_id: str, owner: str, ttl_s: float) -> bool:
        """Take the lease if it is free, expired, or already ours; False if another holds it."""
        ...

    def renew(self, conversation_id: str, owner: str, ttl_s: float) -> bool:
        """Extend our lease; False when it is no longer ours (we stalled and lost it)."""
        ...

    def release(self, conversation_id: str, owner: str) -> None:
        """Give the lease up. Never raises for an outage: a lease that cannot be removed now
        (after retrying) is logged and expires by itself after its TTL."""
        ...

    def expired(self, kind: str | None = None) -> list[str]:
        """Conversations whose holder stopped renewing (crashed): candidates for take-over;
        with ``kind``, only those whose holder was of that kind."""
        ...

    def is_held(self, conversation_id: str) -> bool:
        """True while a live (renewed, unexpired) lease runs the conversation somewhere."""
        ...

    def holder(self, conversation_id: str) -> str | None:
        """The owner of the live lease on the conversation (``cli-…``, ``server-…``), if any:
        what a refusal names."""
        ...

    def holders(self, conversation_ids: Sequence[str]) -> dict[str, str]:
        """``holder`` of many conversations in one read (a listing's page): the held ones."""
        ...

    def close(self) -> None: ...


def open_leases(url: str) -> RunLeases:
    """The lease table of the store at ``url`` (sqlite:/// or postgresql://)."""
    if url.startswith("sqlite:"):
        path, _options = sqlite_path_and_options(url)
        return SqliteRunLeases(str(path))
    return PostgresRunLeases(url)


LEASES_SUFFIX = "-leases"


def sqlite_leases_path(store_path: Path) -> Path:
    """Where the leases of the SQLite store at ``store_path`` live: a file of their own beside
    it (``events.db`` -> ``events.db-leases``, with its own ``-wal`` and ``-shm``).

    Not the store's file: SQLite has one write lock per file, and every durable event commit
    holds it through its fsync. In the store's file a lease write (a run's start, each
    renewal) waited behind the events' commits of every process, and they behind it: with
    200 conversations running in two workers, taking a run's lease took 10-13 ms on average
    (up to ~0.5 s), most of a run request's time. In a file of their own lease writes wait
    only for each other (a few tens of microseconds each, no fsync)."""
    return store_path.with_name(store_path.name + LEASES_SUFFIX)


class SqliteRunLeases:
    """Leases in a SQLite file beside the store's: serialised by its write lock (one machine)."""

    def __init__(self, path: str) -> None:
        store = Path(path)
        self._path = sqlite_leases_path(store)
        if not store.is_file():
            # The store's file must exist: leases alone beside nothing would make a store
            # path that is not a Treadle store look in use.
            raise StoreError(
                f"cannot open the run leases of store {path}: there is no store there; open "
                "the store first"
            )
        try:
            self._conn = sqlite3.connect(
                f"file:{quote(str(self._path))}?mode=rwc",
                uri=True,
                timeout=LEASE_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as error:
            raise StoreError(
                f"cannot open the run leases of store {path} ({error}); open the store first"
            ) from None
        self._lock = threading.Lock()  # one connection, used by the run threads in turn
        try:
            with self._lock, self._errors():
                # WAL: reading a lease never waits for a lease write. No fsync per lease write
                # (synchronous NORMAL): a lease only matters while its holder lives, and a
                # power loss that could undo the last writes (never corrupt the file: WAL with
                # NORMAL) ends every holder with it (one machine; PostgreSQL's leases stay
                # synchronous: its holders outlive its crash). A killed process loses nothing
                # either way.
                if enter_wal_mode(self._conn, LEASE_BUSY_TIMEOUT_S) != "wal":
                    raise StoreError(f"cannot put the run leases file {self._path} in WAL mode")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS run_leases (conversation_id TEXT PRIMARY KEY,"
                    " owner TEXT NOT NULL, expires_at REAL NOT NULL)"
                )
        except BaseException:
            self._conn.close()
            raise

    def _errors(self) -> AbstractContextManager[None]:
        return sqlite_errors(self._path, busy_timeout=LEASE_BUSY_TIMEOUT_S)

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        with self._lock, self._errors():
            conn = self._conn
            begin_immediate(conn, LEASE_BUSY_TIMEOUT_S)
            try:
                changed = conn.execute(sql, params).rowcount
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return changed

    def acquire(self, conversation_id: str, owner: str, ttl_s: float) -> bool:
        now = time.time()
        changed = self._write(
            "INSERT INTO run_leases VALUES (?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET"
            " owner = excluded.owner, expires_at = excluded.expires_at"
            " WHERE run_leases.expires_at < ? OR run_leases.owner = excluded.owner",
            (conversation_id, owner, now + ttl_s, now),
        )
        return changed == 1

    def renew(self, conversation_id: str, owner: str, ttl_s: float) -> bool:
        changed = self._write(
            "UPDATE run_leases SET expires_at = ? WHERE conversation_id = ? AND owner = ?",
            (time.time() + ttl_s, conversation_id, owner),
        )
        return changed == 1

    def release(self, conversation_id: str, owner: str) -> None:
        with _best_effort(conversation_id):
            self._write(
                "DELETE FROM run_leases WHERE conversation_id = ? AND owner = ?",
                (conversation_id, owner),
            )

    def expired(self, kind: str | None = None) -> list[str]:
        with self._lock, self._errors():
            rows = self._conn.execute(
                "SELECT conversation_id FROM run_leases WHERE expires_at < ?"
                " AND (? IS NULL OR substr(owner, 1, length(?) + 1) = ? || '-')",
                (time.time(), kind, kind, kind),
            ).fetchall()
        return [row[0] for row in rows]

    def is_held(self, conversation_id: str) -> bool:
        with self._lock, self._errors():
            row = self._conn.execute(
                "SELECT 1 FROM run_leases WHERE conversation_id = ? AND expires_at >= ?",
                (conversation_id, time.time()),
            ).fetchone()
        return row is not None

    def holder(self, conversation_id: str) -> str | None:
        with self._lock, self._errors():
            row = self._conn.execute(
                "SELECT owner FROM run_leases WHERE conversation_id = ? AND expires_at >= ?",
                (conversation_id, time.time()),
            ).fetchone()
        return None if row is None else str(row[0])

    def holders(self, conversation_ids: Sequence[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(conversation_ids))
        found: dict[str, str] = {}
        with self._lock, self._errors():
            now = time.time()
            for start in range(0, len(wanted), IDS_PER_STATEMENT):
                part = wanted[start : start + IDS_PER_STATEMENT]
                rows = self._conn.execute(
                    "SELECT conversation_id, owner FROM run_leases WHERE expires_at >= ? "
                    f"AND conversation_id IN ({', '.join('?' * len(part))})",
                    (now, *part),
                ).fetchall()
                found.update((str(cid), str(owner)) for cid, owner in rows)
        return found

    def close(self) -> None:
        self._conn.close()


LEASE_POOL_SIZE = 4
"""PostgreSQL connections a process's leases keep open at most."""


class PostgresRunLeases:
    """Leases in the store's schema; the upsert's row lock decides between racing servers."""

    def __init__(self, url: str, *, reconnect_s: float | None = None) -> None:
        # lazily: psycopg is only needed by those who use PostgreSQL
        from treadle.store.postgres_schema import parse_postgres_url
        from treadle.store.postgres_sessions import DEFAULT_RECONNECT_S, Pool, connect

        # Lease statements are single short upserts: a few connections serve every run of
        # the process (each pool counts against PostgreSQL's max_connections).

        conninfo, schema, _durability = parse_postgres_url(url)
        # A pool of its own (application_name treadle-leases:<schema>): a broken connection
        # is replaced, and run threads renewing at once do not queue behind one connection.
        self._pool = Pool(
            lambda: connect(conninfo, schema, "durable", "leases"),
            reconnect_s=DEFAULT_RECONNECT_S if reconnect_s is None else reconnect_s,
            size=LEASE_POOL_SIZE,
        )
        self._execute(
            "CREATE TABLE IF NOT EXISTS run_leases ("
            " conversation_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)"
        )

    def _execute(self, query: str, params: tuple[Any, ...] = ()) -> _Result:
        """``query`` on a sound connection, run again on a fresh one if the connection breaks:
        each lease statement leaves the same row however often it runs (the upsert and the
        renewal of an owner are idempotent, so is a delete)."""

        def run() -> _Result:
            with self._pool.connection() as conn:
                cursor = conn.execute(query, params)
                return _Result(cursor.rowcount, cursor.fetchall() if cursor.description else [])

        return self._pool.retry(run)

    def acquire(self, conversation_id: str, owner: str, ttl_s: float) -> bool:
        row = self._execute(
            "INSERT INTO run_leases VALUES (%s, %s, now() + make_interval(secs => %s))"
            " ON CONFLICT (conversation_id) DO UPDATE SET"
            " owner = excluded.owner, expires_at = excluded.expires_at"
            " WHERE run_leases.expires_at < now() OR run_leases.owner = excluded.owner"
            " RETURNING owner",
            (conversation_id, owner, ttl_s),
        ).fetchone()
        return row is not None

    def renew(self, conversation_id: str, owner: str, ttl_s: float) -> bool:
        cursor = self._execute(
            "UPDATE run_leases SET expires_at = now() + make_interval(secs => %s)"
            " WHERE conversation_id = %s AND owner = %s",
            (ttl_s, conversation_id, owner),
        )
        return cursor.rowcount == 1

    def release(self, conversation_id: str, owner: str) -> None:
        with _best_effort(conversation_id):
            self._execute(
                "DELETE FROM run_leases WHERE conversation_id = %s AND owner = %s",
                (conversation_id, owner),
            )

    def expired(self, kind: str | None = None) -> list[str]:
        rows = self._execute(
            "SELECT conversation_id FROM run_leases WHERE expires_at < now()"
            " AND (%s::text IS NULL OR starts_with(owner, %s::text || '-'))",
            (kind, kind),
        ).fetchall()
        return [row[0] for row in rows]

    def is_held(self, conversation_id: str) -> bool:
        row = self._execute(
            "SELECT 1 FROM run_leases WHERE conversation_id = %s AND expires_at >= now()",
            (conversation_id,),
        ).fetchone()
        return row is not None

    def holder(self, conversation_id: str) -> str | None:
        row = self._execute(
            "SELECT owner FROM run_leases WHERE conversation_id = %s AND expires_at >= now()",
            (conversation_id,),
        ).fetchone()
        return None if row is None else str(row[0])

    def holders(self, conversation_ids: Sequence[str]) -> dict[str, str]:
        if not conversation_ids:
            return {}
        rows = self._execute(
            "SELECT conversation_id, owner FROM run_leases "
            "WHERE conversation_id = ANY(%s) AND expires_at >= now()",
            (list(conversation_ids),),
        ).fetchall()
        return {str(cid): str(owner) for cid, owner in rows}

    def close(self) -> None:
        self._pool.close()


@dataclass(frozen=True, slots=True)
class _Result:
    """What a lease statement returned, read before its connection went back to the pool."""

    rowcount: int
    rows: list[tuple[Any, ...]]

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


@contextmanager
def _best_effort(conversation_id: str) -> Iterator[None]:
    """Swallow (and log) an outage: a lease left behind expires after its TTL anyway, and the
    caller (often a ``finally`` of a run thread) must not die of it."""
    try:
        yield
    except StoreUnavailable as error:
        logger.warning(
            "could not release the run lease of %s (%s); it expires after its TTL",
            conversation_id,
            error,
        )
