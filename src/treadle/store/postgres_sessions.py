"""How a process talks to PostgreSQL: a store session's settings (``connect``), PostgreSQL's
errors as the StoreErrors that say whose they are, and the bounded pool of sessions that one
process's store, leases or eval tables lend their threads.

A pool rather than a connection per thread: server threads come and go (executors), and a
per-thread connection would stay open after its thread ended; sharing one connection would
serialise every thread behind it. Bounded: a server worker runs dozens of conversations at
once, and an unbounded pool opened a session for each thread that asked at the same moment,
then closed all but a few when they came back. With several workers on one database that went
past PostgreSQL's ``max_connections`` ("too many clients": runs failed), and each session
opened and closed again cost both sides a connection's setup. Now at most ``size``
connections are open (idle or lent); a thread that finds them all lent waits for one to come
back, and the idle ones stay open for the next.

A thread that already holds a connection of the pool never waits for another (it would wait for
itself, and with every connection lent to such threads, for ever): its second is opened beyond
the bound, and closed when given back while the pool is full.

A connection that broke (server restart, ``pg_terminate_backend``, network) is never lent
again: an idle one is checked before reuse, and one that failed is closed. ``retry`` runs an
operation again on a fresh connection for up to ``reconnect_s`` seconds.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from treadle.store.base import StoreError, StoreUnavailable

T = TypeVar("T")

DEFAULT_POOL_SIZE = 8
"""Connections a store's pool keeps open at most (per process): a server worker's threads hold
one only for a statement or a transaction, so a few serve dozens of running conversations."""
DEFAULT_WAIT_S = 30.0
"""How long a thread waits for a connection of a full pool before StoreUnavailable."""
DEFAULT_RECONNECT_S = 5.0
"""How long an operation keeps trying to reach PostgreSQL again after its connection was lost
before it gives up with StoreUnavailable."""
_RETRY_PAUSES = (0.0, 0.05, 0.2, 0.5, 1.0)
"""Waits before successive reconnection attempts (the last repeats): a killed backend is
replaced at once, a restarting server is given time."""


# libpq's words for a refusal that retrying cannot fix (the URL or the role is wrong)
_CONFIG_FAILURES = ("does not exist", "authentication failed", "no pg_hba.conf entry", "invalid")


def connect(conninfo: str, schema: str, durability: str, role: str) -> psycopg.Connection[Any]:
    """A session of the store: autocommit, the schema on the search path, the commit mode."""
    # application_name lets an operator see in pg_stat_activity who holds what.
    # synchronous_commit is set, not inherited: a server default of "off" must not quietly
    # turn "durable" into "fast".
    commit = "on" if durability == "durable" else "off"
    # Every query reads one conversation's slice of the shared events table through an index
    # in seq order, and pages stop early. A seq scan would read every conversation, and a
    # bitmap scan must read all matches and sort them: before statistics exist (a new or
    # fast-growing store) the planner chose those, up to 30x slower. At the default
    # random_page_cost it also preferred seq scan + sort for long ranges (5x slower); JIT
    # only adds compile time to these short queries.
    tuning = "-c random_page_cost=1.1 -c enable_seqscan=off -c enable_bitmapscan=off -c jit=off"
    try:
        conn = psycopg.connect(
            conninfo,
            autocommit=True,
            application_name=f"treadle-{role}:{schema}",
            options=f'-c search_path="{schema}" -c synchronous_commit={commit} {tuning}',
        )
        conn.prepare_threshold = None
        return conn
    except psycopg.OperationalError as error:
        text = str(error).strip()
        # A wrong URL or role is the caller's to fix; anything else (refused, timed out, too
        # many clients, shutting down) is an outage: worth retrying later.
        kind = StoreError if any(word in text for word in _CONFIG_FAILURES) else Unreachable
        raise kind(
            f"cannot connect to PostgreSQL at {describe(conninfo)}: {text}; check that the "
            "server runs and the URL's user, host, port and database"
        ) from None


def describe(conninfo: str) -> str:
    """user@host:port/dbname of a conninfo: enough to say where, never the password."""
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "the given URL"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"{user}{parts.get('host', 'localhost')}{port}/{parts.get('dbname', '')}"


class Unreachable(StoreUnavailable):
    """PostgreSQL could not be reached, or the connection broke: a fresh connection may do."""


def store_error(error: psycopg.Error) -> StoreError:
    """A PostgreSQL error as the StoreError that says whose it is: StoreUnavailable for what
    retrying later may fix (connection, disk full, too many clients, read-only server),
    plain StoreError for a refused value or a damaged or foreign schema."""
    if isinstance(error, psycopg.DataError):
        return StoreError(f"PostgreSQL refused a value given: {error}")
    state = error.sqlstate or ""
    if state.startswith("53"):  # insufficient resources: disk full, out of memory, clients
        return StoreUnavailable(
            f"PostgreSQL is out of resources ({str(error).strip()}); nothing of this operation "
            "was stored; free disk space or connections on the database server and retry"
        )
    if isinstance(error, errors.ReadOnlySqlTransaction):
        return StoreUnavailable(
            f"PostgreSQL accepts no writes now ({error}); point the store at a writable "
            "primary, or retry when it is one again"
        )
    if isinstance(error, psycopg.OperationalError):
        return StoreUnavailable(
            f"PostgreSQL could not do this now ({str(error).strip()}); retry later"
        )
    return StoreError(f"PostgreSQL refused this operation ({type(error).__name__}: {error})")


class Pool:
    """At most ``size`` connections made by ``connect``, lent to one thread at a time."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        *,
        reconnect_s: float = DEFAULT_RECONNECT_S,
        size: int = DEFAULT_POOL_SIZE,
        wait_s: float = DEFAULT_WAIT_S,
    ) -> None:
        if size < 1:
            raise ValueError(f"a pool holds at least one connection, not {size}")
        self._connect = connect
        self._size = size
        self._wait_s = wait_s
        self._idle: list[psycopg.Connection[Any]] = []
        self._open = 0
        """Connections made and not closed: lent or idle."""
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)
        self._held = threading.local()
        self._closed = False
        self._pid = os.getpid()
        self.reconnect_s = reconnect_s

    @property
    def open_connections(self) -> int:
        """Connections open now, lent or idle (for tests and diagnostics)."""
        return self._open

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for this thread; Unreachable when it breaks (or none can be made),
        ``store_error`` of PostgreSQL's other refusals, StoreUnavailable when every connection
        stayed lent for ``wait_s``."""
        held = getattr(self._held, "count", 0)
        conn = self._take(nested=held > 0)
        self._held.count = held + 1
        try:
            yield conn
        except psycopg.Error as error:
            if conn.broken or conn.closed:
                raise Unreachable(
                    f"the PostgreSQL connection was lost ({str(error).strip()}); check the "
                    "server and retry"
                ) from error
            raise store_error(error) from error
        finally:
            self._held.count = held
            self._give_back(conn)

    def _take(self, *, nested: bool) -> psycopg.Connection[Any]:
        deadline: float | None = None
        while True:
            with self._lock:
                if self._pid != os.getpid():
                    # a forked child must not talk on its parent's sockets: forget, don't close
                    self._idle, self._open, self._pid = [], 0, os.getpid()
                while True:
                    if self._closed:
                        raise StoreError("this store is closed; open it again with open_store(url)")
                    if self._idle or self._open < self._size or nested:
                        break
                    now = time.monotonic()
                    deadline = deadline or now + self._wait_s
                    if now >= deadline:
                        raise StoreUnavailable(
                            f"all {self._size} PostgreSQL connections of this process's pool "
                            f"stayed in use for {self._wait_s:g} s; the database or this "
                            "process is overloaded: retry later"
                        )
                    self._returned.wait(deadline - now)
                conn = self._idle.pop() if self._idle else None
                if conn is None:
                    self._open += 1  # counted before it is made: others wait for it too
            if conn is None:
                try:
                    return self._connect()
                except BaseException:
                    self._forget()
                    raise
            if _idle_and_sound(conn):
                return conn
            conn.close()
            self._forget()

    def _forget(self) -> None:
        """One connection less is open (closed, or never made): a waiter may open one."""
        with self._lock:
            self._open -= 1
            self._returned.notify()

    def retry(self, operation: Callable[[], T], *, first: Unreachable | None = None) -> T:
        """``operation()``, run again while it fails with Unreachable (each run takes a fresh
        connection), for up to ``reconnect_s``; then the last Unreachable, saying so.
        ``first``: the failure that already happened (the next run is then a retry)."""
        deadline = time.monotonic() + self.reconnect_s
        pauses = iter(_RETRY_PAUSES)
        failure = first
        while True:
            if failure is not None:
                pause = next(pauses, _RETRY_PAUSES[-1])
                if self._closed or time.monotonic() + pause > deadline:
                    raise Unreachable(
                        f"{failure} (gave up after {self.reconnect_s:g} s of reconnecting)"
                    ) from failure
                time.sleep(pause)
            try:
                return operation()
            except Unreachable as error:
                failure = error

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        reusable = not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE
        with self._lock:
            if self._pid != os.getpid():
                return  # lent before a fork: the parent's, not this process's to count
            if reusable and not self._closed and self._open <= self._size:
                self._idle.append(conn)
                self._returned.notify()
                return
        conn.close()
        self._forget()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the idle connections; each lent one is closed when it comes back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._returned.notify_all()
        for conn in idle:
            conn.close()


def _idle_and_sound(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection can be lent: open, and with nothing unread on its socket.
    An idle session gets no unasked messages (these connections LISTEN to nothing); a
    terminated backend leaves its last error and EOF there. A poll costs no round trip."""
    if conn.closed:
        return False
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return not poller.poll(0)


def free_sessions(conninfo: str) -> int | None:
    """Sessions the database server can still open for a user without superuser rights:
    ``max_connections`` less those reserved for superusers and those open now. None when it
    cannot be asked (the store's own open then says why)."""
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT current_setting('max_connections')::int, "
                "current_setting('superuser_reserved_connections')::int, "
                "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
            ).fetchone()
    except psycopg.Error:
        return None
    if row is None:
        return None
    most, reserved, used = (int(value) for value in row)
    return max(0, most - reserved - used)
