"""The SQLite ``EventStore``: one WAL-mode file per store, schema migrations, appends under
SQLite's write lock, paths and searches served by the file's own indexes.

Durability modes (``?durability=`` in the URL, or ``durability=`` to ``open_store``):

- ``durable`` (default): ``synchronous=FULL``. The WAL is fsynced at every commit, so every
  acknowledged append survives a killed process and a power loss.
- ``fast``: ``synchronous=NORMAL``. Commits reach the OS but are fsynced only at checkpoints: an
  acknowledged append survives a killed process (kill -9), but a power loss or OS crash may lose
  the last moments of appends. The file is never corrupted in either mode.

The APPEND contract (docs/contracts.md) holds across threads and processes: an append runs in a
``BEGIN IMMEDIATE`` transaction (SQLite's one write lock for the file), after a per-store thread
lock so that threads of one process queue in order instead of busy-waiting on the file lock.
Appends that wait meanwhile share the next transaction and its fsync (``group_commit``: each
undone alone when refused, each acknowledged only once the shared commit returned), so many
conversations appending at once pay one fsync per group, not one each. What an append needs no
stored state for (its JSON, time keys, usage) is made on the caller's thread before it queues
(``append_plan.prepare_append``), so the one thread running a group's SQL does only that.

Subscriptions poll ``PRAGMA data_version`` (a read of the shared WAL index, no disk I/O) every
``poll_interval`` seconds, so an event appended by another thread or process is delivered at
most ``poll_interval`` (default 0.05 s) after its commit.

Each event row also records its *branch*: the seq of the first event of the chain segment it
extends. An event extends its parent's segment when the parent is that segment's last event,
else it starts a new one. A path is then a few (branch, seq range) segments, one per fork on it,
so a path window, a full path and a branch-filtered search page are index range scans.

Text search is served by a trigram index filled by a thread of the store behind the appends,
exact and without lag all the same (treadle.store.sqlite_text).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import weakref
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from treadle.data.ids import new_id
from treadle.errors import AppendError
from treadle.events.audit_facts import AuditFacts
from treadle.events.branches import BranchSummary, Line, Node
from treadle.events.model import ROOT, Event
from treadle.store import sqlite_open_files as open_files
from treadle.store.append_plan import (
    PreparedAppend,
    assign_branches,
    plan_append,
    prepare_append,
)
from treadle.store.audit_rows import LINK_KINDS, audit_facts_from_rows
from treadle.store.base import (
    ConversationExists,
    ConversationInfo,
    ConversationNotFound,
    EventNotFound,
    EventPage,
    EventQuery,
    EventShape,
    HeadMoved,
    StoredEvent,
    StoreError,
    StoreUnavailable,
    shapes_from_rows,
)
from treadle.store.branch_rows import summary_from_index
from treadle.store.bulk_appends import is_bulk
from treadle.store.checks import check_conversation_id, check_text
from treadle.store.conversation_rows import conversation_info, metadata_json
from treadle.store.group_commit import GroupCommit
from treadle.store.paging import check_query, page_of
from treadle.store.payloads import read_payload
from treadle.store.sqlite_locking import begin_immediate, enter_wal_mode
from treadle.store.sqlite_schema import (
    DEFAULT_BUSY_TIMEOUT,
    migrate,
    read_schema_version,
    schema_version,
)
from treadle.store.sqlite_search import (
    count_rows,
    icontains,
    page_rows,
    path_payloads,
    path_segments,
)
from treadle.store.sqlite_text import (
    TAIL_TO_INDEX,
    TextIndexer,
    drop_conversation,
    index_chunk,
    indexable,
    indexed_count,
)
from treadle.store.status_columns import STATUS_COLUMNS, STATUS_UPDATE
from treadle.store.usage_totals import USAGE_COLUMNS, USAGE_UPDATE

DURABILITY_MODES = {"durable": "FULL", "fast": "NORMAL"}

WAL_CHECKPOINT_PAGES = 10_000


def connection_pragmas(durability: str) -> list[str]:
    """The settings of every connection to a store (the benchmark's raw sqlite3 uses them too).

    A checkpoint every 10,000 WAL pages (~40 MB) rather than SQLite's 1,000: event ids are
    random, so each append dirties a random leaf of the id index, and a checkpoint writes each
    dirty page once however many appends touched it. With the short default the pages written
    per append grow with the index (an append cost 2x more at 100,000 events than at 0, on this
    machine); with the longer WAL the cost stays flat. The WAL file is truncated back to 64 MB.
    """
    return [
        f"PRAGMA synchronous={DURABILITY_MODES[durability]}",
        f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}",
        "PRAGMA journal_size_limit=67108864",
        "PRAGMA temp_store=MEMORY",
        "PRAGMA cache_size=-8192",  # KiB: 8 MiB of pages per connection
    ]


_fork_generation = 0
"""Counts forks: a connection of an earlier generation belongs to a parent process and must
not be used (nor closed) by the child. Cheaper than os.getpid() on every call."""


def _after_fork_in_child() -> None:
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)

IDS_PER_STATEMENT = 500
"""Ids bound in one ``IN (...)`` statement (SQLite limits a statement's parameters)."""
_SUBSCRIBE_BATCH = 500


# -- connections -------------------------------------------------------------------------------


class _Connection:
    """A thread's connection; weak-referenceable (sqlite3.Connection is not) for ``close``.

    ``in_use`` is held while statements run on it (``SqliteEventStore._lent``, a
    subscriber's query): closing a connection under a statement another thread is stepping
    frees what that thread still reads (a crash, not an error), so ``close`` takes it
    first. Reentrant: a thread inside its own statements may close the store."""

    __slots__ = ("__weakref__", "conn", "generation", "in_use")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.generation = _fork_generation
        self.in_use = threading.RLock()

    def __enter__(self) -> sqlite3.Connection:
        """``in_use`` held, as ``SqliteEventStore._lent`` does: a plain context manager, for
        the appends' path (a generator-based one costs a few µs per append)."""
        self.in_use.acquire()
        return self.conn

    def __exit__(self, *_exc: object) -> None:
        self.in_use.release()

    def __del__(self) -> None:
        # A thread's holder goes when the thread ends (its thread-local is cleared). Its
        # connection must close then: it sits in a reference cycle (its statement cache), so
        # only the garbage collector would free it, and ``close`` no longer sees it (the
        # registry is weak), so a server making a thread per model call would pile up open
        # connections. Never in a forked child: closing the parent's connection there would
        # drop the parent's locks on the file.
        if self.generation == _fork_generation:
            with contextlib.suppress(sqlite3.Error):
                self.conn.close()


class _SubscriptionClosed(Exception):
    """Raised inside a subscriber when its store closed: the subscription ends quietly."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


# SQLite's primary result codes (error.sqlite_errorcode & 0xFF) that mean "not now": the file
# is locked, read-only, full, gone or failing, none of them the caller's input at fault.
_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_UNAVAILABLE_CODES = {
    3: "permission to it was denied",  # SQLITE_PERM
    8: "it is read-only (file or folder permissions, or a read-only file system)",  # READONLY
    10: "a disk I/O error occurred (the file may have been removed, or the disk failed)",  # IOERR
    13: "the disk is full",  # SQLITE_FULL
    14: "the file cannot be opened (removed, or its folder is not writable)",  # CANTOPEN
}
_DAMAGED_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB


@contextmanager
def sqlite_errors(path: Path, *, busy_timeout: float) -> Iterator[None]:
    """SQLite's errors raised inside as ``sqlite_error`` says."""
    try:
        yield
    except sqlite3.Error as error:
        raise sqlite_error(error, path, busy_timeout=busy_timeout) from error


def sqlite_error(error: sqlite3.Error, path: Path, *, busy_timeout: float) -> StoreError:
    """A SQLite error as the StoreError that says what to do: StoreUnavailable for what
    retrying later may fix (locked, read-only, disk full, file removed), plain StoreError for
    a damaged file and anything else."""
    code = getattr(error, "sqlite_errorcode", 1) & 0xFF
    if code in _BUSY_CODES:
        return StoreUnavailable(
            f"store {path} stayed locked by another writer for more than {busy_timeout:g} s; "
            "retry, or find the process holding it"
        )
    if code in _UNAVAILABLE_CODES:
        return StoreUnavailable(
            f"store {path} cannot be written now: {_UNAVAILABLE_CODES[code]} ({error}); "
            "nothing of this operation was stored; fix that and retry"
        )
    if code in _DAMAGED_CODES:
        return StoreError(
            f"store {path} is damaged ({error}); run 'treadle store check --store "
            f"sqlite:///{path}' and restore it from a backup"
        )
    return StoreError(f"store {path}: {error}")


class SqliteEventStore:
    """``EventStore`` in one SQLite file (see the module docstring for durability and locking).

    Connections: one per thread (``threading.local``). WAL lets readers of other threads read
    while one thread writes (a single shared connection would queue every read behind a
    writer's fsync), and sqlite3 connections must not be used by two threads at once anyway.
    A thread's connection closes when the thread ends; ``close`` closes those still open.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "durable",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise StoreError(
                f"durability {durability!r} is unknown; use one of {', '.join(DURABILITY_MODES)}"
            )
        self.path = Path(path).expanduser().absolute()
        self._path_text = str(self.path)  # os.stat of a str: no Path.__fspath__ per append
        self.durability = durability
        self.url = f"sqlite:///{self.path}" + (
            "" if durability == "durable" else "?durability=fast"
        )
        self._busy_timeout = float(busy_timeout)
        self._local = threading.local()
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._subscriptions: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._registry_lock = threading.Lock()
        self._write_lock = threading.Lock()
        # The appends' check that the path still names this store's file runs once, after
        # each commit (it is what tells a caller that a write went to a removed file), not
        # also when the connection is lent: one os.stat per append, not two.
        self._commits = GroupCommit(
            lambda: self._holder(check=False),
            self._write_lock,
            after_commit=lambda: self._check_file(writing=True),
            begin=lambda conn: begin_immediate(conn, self._busy_timeout),
        )
        self._closed = False
        self._indexer = TextIndexer(self._index_text_chunk, f"treadle-text-index {self.path.name}")
        self._indexer_sync = threading.local()
        self._identity: tuple[int, int] | None = None
        """(device, inode) of the file this store opened; None only while opening, the one
        time a connection may create the file."""
        if not self.path.parent.is_dir():
            raise StoreError(
                f"cannot open store {self.url}: directory {self.path.parent} does not exist; "
                "create it or fix the URL"
            )
        if not create and not self.path.exists():
            raise StoreError(f"there is no store at {self.path}; check the --store URL")
        with open_files.opening(self.path) as first_here:
            # A file this process has open already was checked (and migrated) by the store
            # that opened it: reading it outside SQLite now would drop that store's locks.
            if first_here and read_schema_version(self.path) < schema_version():
                self._migrate()
            self._identity = self._file_identity()
            if self._identity is not None:
                open_files.add(self._identity)

    # -- connections and schema -------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # Only the first open may create the file (mode=rwc): a connection opened later, to a
        # path whose file was removed, must fail instead of making an empty store there.
        mode = "rwc" if self._identity is None else "rw"
        try:
            # check_same_thread=False only so that `close` may close it from another thread.
            conn = sqlite3.connect(
                f"file:{quote(str(self.path))}?mode={mode}",
                uri=True,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=64,
            )
        except sqlite3.Error as error:
            raise StoreUnavailable(
                f"cannot open store file {self.path}: {error}"
                + ("; it was removed while the store was open" if mode == "rw" else "")
            ) from None
        try:
            self._check_file()  # the file opened is the one this store opened first
            for pragma in connection_pragmas(self.durability):
                conn.execute(pragma)
            conn.create_function("treadle_icontains", 2, icontains, deterministic=True)
        except sqlite3.Error as error:
            conn.close()
            raise sqlite_error(error, self.path, busy_timeout=self._busy_timeout) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            found = os.stat(self._path_text)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StoreUnavailable(
                f"cannot reach store file {self.path}: {error.strerror or error}"
            ) from None
        return found.st_dev, found.st_ino

    def _check_file(self, *, writing: bool = False) -> None:
        """StoreUnavailable unless the path still names the file this store opened (an os.stat
        of it): connections keep using a removed or replaced file, and what they wrote there
        would be lost with it."""
        if self._identity is None:
            return
        found = self._file_identity()
        if found == self._identity:
            return
        what = "removed" if found is None else "replaced by another file"
        lost = " This write went to the old file and is lost with it." if writing else ""
        raise StoreUnavailable(
            f"store file {self.path} was {what} while the store was open; nothing more is "
            f"read or written here.{lost} Restore the file, or restart to open what is at "
            "that path now"
        )

    @contextmanager
    def _lent(self, *, check: bool = True) -> Iterator[sqlite3.Connection]:
        """This thread's connection, held while the caller's statements run on it: ``close``
        from another thread waits for them instead of freeing what they still read.
        ``check``: see ``_holder``."""
        holder = self._holder(check=check)
        with holder.in_use:
            yield holder.conn

    def _holder(self, *, check: bool = True) -> _Connection:
        """This thread's connection; first ``_check_file`` unless ``check`` is False (a
        writer that checks after its commit instead)."""
        holder: _Connection | None = getattr(self._local, "holder", None)
        if holder is not None and holder.generation == _fork_generation:
            if check:
                self._check_file()
            return holder
        if self._closed:
            raise self._closed_error()
        # A forked child gets a connection of its own: sharing the parent's is unsafe.
        holder = _Connection(self._connect())
        with self._registry_lock:
            # ``close`` may have run while this one opened: it did not see it, so it would
            # stay open and keep serving this thread after the store closed.
            if self._closed:
                holder.conn.close()
                raise self._closed_error()
            self._connections.add(holder)
        self._local.holder = holder
        return holder

    def _closed_error(self) -> StoreError:
        return StoreError(f"store {self.url} is closed; open it again with open_store(url)")

    def _migrate(self) -> None:
        with self._errors(), self._lent() as conn:
            mode = enter_wal_mode(conn, self._busy_timeout)
            if mode != "wal":
                raise StoreError(f"cannot put {self.path} in WAL mode (got {mode!r})")
        with self._writing() as conn:
            migrate(conn, self.path)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors as StoreErrors that say what to do."""
        try:
            yield
        except sqlite3.Error as error:
            raise self._store_error(error) from error

    def _store_error(self, error: sqlite3.Error) -> StoreError:
        if isinstance(error, sqlite3.ProgrammingError):
            if self._closed:
                return StoreError(f"store {self.url} is closed; open it again")
            raise error  # a bug of ours, not the user's to fix
        return sqlite_error(error, self.path, busy_timeout=self._busy_timeout)

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding the thread lock and SQLite's write lock."""
        with self._write_lock, self._errors(), self._lent() as conn:
            # IMMEDIATE takes the file's write lock now, so the reads below already see every
            # commit of other writers (APPEND step 1) and nobody commits until we are done.
            begin_immediate(conn, self._busy_timeout)
            try:
                yield conn
                conn.execute("COMMIT")
                self._check_file(writing=True)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees the same snapshot."""
        with self._errors(), self._lent() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection of this store. Statements other threads are running end
        first; what they ask for afterwards is refused (StoreError: the store is closed)."""
        self._indexer.stop()  # first: its chunk in progress still needs its connection
        with self._registry_lock:  # from here no thread registers a connection (_holder)
            was_closed, self._closed = self._closed, True
            holders = list(self._connections) + list(self._subscriptions)
            self._connections = weakref.WeakSet()
        for holder in holders:
            if holder.generation == _fork_generation:
                with holder.in_use:  # a statement in progress ends first
                    holder.conn.close()
        self._local = threading.local()
        if not was_closed and self._identity is not None:
            open_files.discard(self._identity)  # its connections are closed

    def __enter__(self) -> SqliteEventStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- conversations ----------------------------------------------------------------------

    _CONVERSATION_COLUMNS = (
        "id, title, created_at, updated_at, head_id, event_count, metadata, "
        f"{USAGE_COLUMNS}, {STATUS_COLUMNS}"
    )

    def create_conversation(
        self,
        conversation_id: str | None = None,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationInfo:
        conversation_id = new_id() if conversation_id is None else conversation_id
        check_conversation_id(conversation_id)
        check_text("title", title)
        metadata_text = metadata_json(metadata)
        now = _now()
        with self._writing() as conn:
            try:
                conn.execute(
                    "INSERT INTO conversations (id, title, created_at, updated_at, metadata) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (conversation_id, title, now, now, metadata_text),
                )
            except sqlite3.IntegrityError:
                raise ConversationExists(conversation_id) from None
            return self._conversation_info(conn, conversation_id)

    def get_conversation(self, conversation_id: str) -> ConversationInfo:
        with self._errors(), self._lent() as conn:
            return self._conversation_info(conn, conversation_id)

    def list_conversations(self, *, limit: int = 100, offset: int = 0) -> list[ConversationInfo]:
        with self._errors(), self._lent() as conn:
            rows = conn.execute(
                f"SELECT {self._CONVERSATION_COLUMNS} FROM conversations "
                "ORDER BY created_at, key LIMIT ? OFFSET ?",
                (limit, offset),
            ).fetchall()
        return [_conversation_info(row) for row in rows]

    def update_conversation(
        self,
        conversation_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationInfo:
        check_text("title", title)
        metadata_text = None if metadata is None else metadata_json(metadata)
        with self._writing() as conn:
            updated = conn.execute(
                "UPDATE conversations SET title = coalesce(?, title), "
                "metadata = coalesce(?, metadata), updated_at = ? WHERE id = ?",
                (title, metadata_text, _now(), conversation_id),
            ).rowcount
            if not updated:
                raise ConversationNotFound(conversation_id)
            return self._conversation_info(conn, conversation_id)

    def delete_conversation(self, conversation_id: str) -> None:
        with self._writing() as conn:
            key = self._key(conn, conversation_id)
            drop_conversation(conn, key)  # needs the payloads: before the events go
            conn.execute("DELETE FROM events WHERE conversation = ?", (key,))
            conn.execute("DELETE FROM tree_lines WHERE conversation = ?", (key,))
            conn.execute("DELETE FROM audit_checkpoints WHERE conversation = ?", (key,))
            conn.execute("DELETE FROM conversations WHERE key = ?", (key,))

    def _conversation_info(
        self, conn: sqlite3.Connection, conversation_id: str
    ) -> ConversationInfo:
        row = conn.execute(
            f"SELECT {self._CONVERSATION_COLUMNS} FROM conversations WHERE id = ?",
            (conversation_id,),
        ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return _conversation_info(row)

    @staticmethod
    def _key(conn: sqlite3.Connection, conversation_id: str) -> int:
        row = conn.execute(
            "SELECT key FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return int(row[0])

    @staticmethod
    def _conversation_row(
        conn: sqlite3.Connection, conversation_id: str
    ) -> tuple[int, int, str | None]:
        row = conn.execute(
            "SELECT key, event_count, head_id FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return int(row[0]), int(row[1]), row[2]

    # -- writing ----------------------------------------------------------------------------

    _UPDATE_AFTER_APPEND = (
        "UPDATE conversations SET event_count = ?, head_id = coalesce(?, head_id), "
        f"updated_at = ?, {USAGE_UPDATE.format('?')}, {STATUS_UPDATE.format('?')} WHERE key = ?"
    )
    """The conversation row after an append: count, head (None: unchanged), usage totals, the
    last status."""
    _CONVERSATION_FOR_APPEND = (
        "SELECT c.key, c.event_count, c.head_id, "
        "(SELECT branch FROM events WHERE conversation = c.key AND seq = c.event_count - 1), "
        "(SELECT seq FROM events WHERE conversation = c.key AND id = ?1), "
        "(SELECT seq FROM events WHERE conversation = c.key AND id = ?2), "
        "(SELECT branch FROM events WHERE conversation = c.key AND id = ?2) "
        "FROM conversations c WHERE c.id = ?3"
    )
    # depth and line (treadle.events.branches.next_line) from the parent's row and the line
    # index; the trigger events_tree_lines then keeps the line rows.
    _INSERT = (
        "INSERT INTO events (conversation, seq, id, parent_seq, branch, kind, source, "
        "time_us, payload, depth, line) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
        "coalesce((SELECT depth + 1 FROM events WHERE conversation = ?1 AND seq = ?4), 0), "
        "CASE WHEN ?4 < 0 THEN ?2 "
        "WHEN ?6 = 'state_change' THEN "
        "(SELECT line FROM events WHERE conversation = ?1 AND seq = ?4) "
        "ELSE coalesce((SELECT line FROM tree_lines WHERE conversation = ?1 AND head = ?4), ?2) "
        "END)"
    )

    def append(self, conversation_id: str, event: Event, *, move_head: bool = True) -> int:
        return self.append_batch(conversation_id, [event], move_head=move_head)[0]

    def append_batch(
        self,
        conversation_id: str,
        events: Sequence[Event],
        *,
        move_head: bool = True,
        expect_head: str | None = None,
    ) -> list[int]:
        # What needs no stored state is done here, on this thread, before it queues: the
        # group's leader then runs only each append's SQL (group_commit), and this thread's
        # encoding overlaps the commit (fsync) of the group before it.
        prepared = prepare_append(list(events), move_head=move_head)
        updated_at = _now()
        # Appends of this process's threads share a transaction and its fsync (group_commit):
        # BEGIN IMMEDIATE takes the file's write lock, so the reads of each append see every
        # commit of other writers (APPEND step 1); each returns once the commit is durable.
        try:
            seqs = self._commits.run(
                lambda conn: self._append_in_transaction(
                    conn, conversation_id, prepared, updated_at, expect_head
                ),
                # One event: its checks, then one INSERT (whole or not at all), then the
                # UPDATE that only SQLite itself can fail; so a refusal has nothing to undo.
                atomic=len(prepared.events) == 1,
            )
        except sqlite3.Error as error:
            raise self._store_error(error) from error
        if is_bulk(len(prepared.events)):
            # A bulk load (an import) pays for its text index before it returns, so a search
            # right after it runs at full speed; live appends leave it to the indexer.
            self.index_text(conversation_id)
        return seqs

    def _append_in_transaction(
        self,
        conn: sqlite3.Connection,
        conversation_id: str,
        prepared: PreparedAppend,
        updated_at: str,
        expect_head: str | None = None,
    ) -> list[int]:
        # The count, head and last event's branch are read here, inside the transaction:
        # another process may have appended since, and nothing of it is cached. A single
        # event's own id and parent are looked up in the same statement (the common case).
        events = prepared.events
        single = events[0] if len(events) == 1 else None
        parent_id = single.parent_id if single is not None else None
        row = conn.execute(
            self._CONVERSATION_FOR_APPEND,
            (single.id if single is not None else None, parent_id, conversation_id),
        ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        key, count, head, last_branch, own_seq, parent_seq, parent_branch = row
        if expect_head is not None and head != (None if expect_head == ROOT else expect_head):
            raise HeadMoved(conversation_id, expect_head, head)
        if not events:
            return []
        if single is None:
            stored = self._look_up(conn, key, prepared.wanted)
        else:
            stored = {}
            if own_seq is not None:
                stored[single.id] = (own_seq, -1)
            if parent_seq is not None and parent_id is not None:
                stored[parent_id] = (parent_seq, parent_branch)
        planned = plan_append(
            conversation_id,
            events,
            next_seq=count,
            stored={event_id: seq for event_id, (seq, _) in stored.items()},
            encoded=prepared.encoded,
        )
        branch_of = dict(stored.values())
        if count:
            branch_of[count - 1] = last_branch
        branches = assign_branches(
            planned,
            branch_of=branch_of,
            tip_of=lambda branch: conn.execute(
                "SELECT max(seq) FROM events WHERE conversation = ? AND branch = ?",
                (key, branch),
            ).fetchone()[0],
        )
        rows = [
            (
                key,
                item.seq,
                item.event.id,
                -1 if item.parent_seq is None else item.parent_seq,
                branch,
                item.event.kind,
                item.event.source,
                item.time_us,
                item.payload,
            )
            for item, branch in zip(planned, branches, strict=True)
        ]
        try:
            if len(rows) == 1:
                conn.execute(self._INSERT, rows[0])
            else:
                conn.executemany(self._INSERT, rows)
        except sqlite3.IntegrityError as error:
            # plan_append already refused duplicates; this only guards the unique index.
            raise AppendError(
                "APPEND-DUP-ID",
                f"the store refused a duplicate: {error}",
                event_ids=prepared.wanted,
            ) from None
        conn.execute(
            self._UPDATE_AFTER_APPEND,
            (
                *(count + len(rows), prepared.new_head, updated_at),
                *(*prepared.usage, *prepared.status, key),
            ),
        )
        return [item.seq for item in planned]

    @staticmethod
    def _look_up(conn: sqlite3.Connection, key: int, ids: set[str]) -> dict[str, tuple[int, int]]:
        """{id: (seq, branch)} of those ``ids`` already in the conversation."""
        found: dict[str, tuple[int, int]] = {}
        wanted = list(ids)
        for start in range(0, len(wanted), IDS_PER_STATEMENT):
            chunk = wanted[start : start + IDS_PER_STATEMENT]
            marks = ",".join("?" * len(chunk))
            for event_id, seq, branch in conn.execute(
                f"SELECT id, seq, branch FROM events WHERE conversation = ? AND id IN ({marks})",
                (key, *chunk),
            ):
                found[event_id] = (seq, branch)
        return found

    def set_head(self, conversation_id: str, event_id: str | None) -> None:
        with self._writing() as conn:
            key = self._key(conn, conversation_id)
            if event_id is not None:
                exists = conn.execute(
                    "SELECT 1 FROM events WHERE conversation = ? AND id = ?", (key, event_id)
                ).fetchone()
                if exists is None:
                    raise EventNotFound(conversation_id, event_id)
            conn.execute(
                "UPDATE conversations SET head_id = ?, updated_at = ? WHERE key = ?",
                (event_id, _now(), key),
            )

    # -- reading ----------------------------------------------------------------------------

    def head(self, conversation_id: str) -> str | None:
        with self._errors(), self._lent() as conn:
            return self._conversation_row(conn, conversation_id)[2]

    def event_count(self, conversation_id: str) -> int:
        with self._errors(), self._lent() as conn:
            return self._conversation_row(conn, conversation_id)[1]

    def event_counts(self, conversation_ids: Sequence[str]) -> dict[str, int]:
        wanted = list(dict.fromkeys(conversation_ids))
        counts: dict[str, int] = {}
        with self._errors(), self._lent() as conn:
            for start in range(0, len(wanted), IDS_PER_STATEMENT):
                part = wanted[start : start + IDS_PER_STATEMENT]
                marks = ", ".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT id, event_count FROM conversations WHERE id IN ({marks})", part
                ).fetchall()
                counts.update((conversation_id, int(count)) for conversation_id, count in rows)
        return counts

    def get_event(self, conversation_id: str, event_id: str) -> StoredEvent:
        with self._reading() as conn:
            key = self._key(conn, conversation_id)
            row = conn.execute(
                "SELECT seq, payload FROM events WHERE conversation = ? AND id = ?",
                (key, event_id),
            ).fetchone()
        if row is None:
            raise EventNotFound(conversation_id, event_id)
        return _stored(row, self.path)

    def shapes(self, conversation_id: str) -> list[EventShape]:
        with self._reading() as conn:
            key = self._key(conn, conversation_id)
            rows = conn.execute(
                "SELECT seq, id, parent_seq, kind FROM events WHERE conversation = ? ORDER BY seq",
                (key,),
            ).fetchall()
        return shapes_from_rows(rows)

    def audit_facts(self, conversation_id: str, start_seq: int, end_seq: int) -> list[AuditFacts]:
        with self._reading() as conn:
            key = self._key(conn, conversation_id)
            # converted as they are read: a million rows are never all held as tuples
            return audit_facts_from_rows(
                conn.execute(_AUDIT_FACTS_SQL, (key, start_seq, end_seq)), start_seq
            )

    def audit_seqs(self, conversation_id: str, ids: Sequence[str], end_seq: int) -> dict[str, int]:
        with self._reading() as conn:
            key = self._key(conn, conversation_id)
            found = self._look_up(conn, key, set(ids))
        return {event_id: seq for event_id, (seq, _) in found.items() if seq < end_seq}

    def audit_checkpoint(self, conversation_id: str) -> tuple[int, datetime, bytes] | None:
        with self._reading() as conn:
            key = self._key(conn, conversation_id)
            row = conn.execute(
                "SELECT upto, created_at, state FROM audit_checkpoints WHERE conversation = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        return int(row[0]), datetime.fromisoformat(row[1]), bytes(row[2])

    def keep_audit_checkpoint(self, conversation_id: str, upto: int, state: bytes) -> None:
        # Its own short transaction, never an append's; only forward, and only for the
        # conversation of that id now (its created_at), as far as it has events.
        with self._writing() as conn:
            key = self._key(conn, conversation_id)
            conn.execute(
                "INSERT INTO audit_checkpoints (conversation, created_at, upto, state) "
                "SELECT key, created_at, ?2, ?3 FROM conversations "
                "WHERE key = ?1 AND event_count >= ?2 "
                "ON CONFLICT (conversation) DO UPDATE SET created_at = excluded.created_at, "
                "upto = excluded.upto, state = excluded.state "
                "WHERE audit_checkpoints.upto <= excluded.upto "
                "OR audit_checkpoints.created_at <> excluded.created_at",
                (key, upto, state),
            )

    def children(self, conversation_id: str, event_id: str) -> list[StoredEvent]:
        with self._reading() as conn:
            key = self._key(conn, conversation_id)
            seq, _ = self._event_position(conn, conversation_id, key, event_id)
            rows = conn.execute(
                "SELECT seq, payload FROM events WHERE conversation = ? AND parent_seq = ? "
                "ORDER BY seq",
                (key, seq),
            ).fetchall()
        return [_stored(row, self.path) for row in rows]

    def branch_summary(self, conversation_id: str) -> BranchSummary:
        """Heads, lines and branch points from the line index: O(branches), no log scan."""
        with self._reading() as conn:
            key, _, head = self._conversation_row(conn, conversation_id)
            lines = [
                Line(*row)
                for row in conn.execute(
                    "SELECT line, base, head FROM tree_lines WHERE conversation = ?", (key,)
                )
            ]

            # CROSS JOIN fixes the loop order: one index lookup per wanted seq or base. With
            # `IN (json_each)` and ORDER BY seq the planner walked the whole conversation in
            # seq order (O(events)); tests/store/test_sqlite.py checks these plans.
            def nodes(seqs: list[int]) -> list[Node]:
                return [
                    Node(*row)
                    for row in conn.execute(
                        "SELECT e.seq, e.id, e.kind, e.depth, e.line, e.time_us "
                        "FROM json_each(?2) AS j CROSS JOIN events AS e "
                        "ON e.conversation = ?1 AND e.seq = j.value",
                        (key, json.dumps(seqs)),
                    )
                ]

            def children(bases: list[int]) -> list[tuple[int, Node]]:
                return [
                    (row[0], Node(*row[1:]))
                    for row in conn.execute(
                        "SELECT e.parent_seq, e.seq, e.id, e.kind, e.depth, e.line, e.time_us "
                        "FROM json_each(?2) AS j CROSS JOIN events AS e "
                        "ON e.conversation = ?1 AND e.parent_seq = j.value "
                        "WHERE e.kind <> 'state_change' ORDER BY e.seq",
                        (key, json.dumps(bases)),
                    )
                ]

            return summary_from_index(lines, nodes, children, head)

    def get_range(self, conversation_id: str, start_seq: int, end_seq: int) -> list[StoredEvent]:
        """Events with ``start_seq <= seq < end_seq``, in seq order."""
        with self._reading() as conn:
            key = self._key(conn, conversation_id)
            rows = conn.execute(
                "SELECT seq, payload FROM events WHERE conversation = ? AND seq >= ? AND seq < ? "
                "ORDER BY seq",
                (key, start_seq, end_seq),
            ).fetchall()
        return [_stored(row, self.path) for row in rows]

    def path_to_root(
        self, conversation_id: str, head_id: str | None = None, limit: int | None = None
    ) -> list[Event]:
        """The active path root..head (TREE-PATH), or its last ``limit`` events: O(limit)."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        with self._reading() as conn:
            key, _, stored_head = self._conversation_row(conn, conversation_id)
            head_id = stored_head if head_id is None else head_id
            if head_id is None:
                return []
            start = self._event_position(conn, conversation_id, key, head_id)
            if limit == 0:
                return []
            payloads = path_payloads(conn, key, path_segments(conn, key, start), limit)
        payloads.reverse()
        return [_decode(payload, self.path) for payload in payloads]

    @staticmethod
    def _event_position(
        conn: sqlite3.Connection, conversation_id: str, key: int, event_id: str
    ) -> tuple[int, int]:
        """(seq, branch) of ``event_id``; EventNotFound when it is not in the conversation."""
        row = conn.execute(
            "SELECT seq, branch FROM events WHERE conversation = ? AND id = ?", (key, event_id)
        ).fetchone()
        if row is None:
            raise EventNotFound(conversation_id, event_id)
        return int(row[0]), int(row[1])

    def search(self, conversation_id: str, query: EventQuery) -> EventPage:
        check_query(query)
        with self._reading() as conn:
            key, event_count, _ = self._conversation_row(conn, conversation_id)
            segments = self._branch(conn, conversation_id, key, query)
            rows = page_rows(conn, key, query, query.limit + 1, segments)
            self._keep_text_index(conn, key, event_count, query)
        return page_of([_stored(row, self.path) for row in rows], query.limit)

    def count(self, conversation_id: str, query: EventQuery) -> int:
        check_query(query)
        with self._reading() as conn:
            key, event_count, _ = self._conversation_row(conn, conversation_id)
            segments = self._branch(conn, conversation_id, key, query)
            found = count_rows(conn, key, event_count, query, segments)
            self._keep_text_index(conn, key, event_count, query)
            return found

    # -- text index (treadle.store.sqlite_text) ---------------------------------------------

    def _keep_text_index(
        self, conn: sqlite3.Connection, key: int, event_count: int, query: EventQuery
    ) -> None:
        """After a text search: ask the indexer to catch up when it scanned a long tail."""
        if query.text is None or not indexable(query.text.lower()):
            return
        if event_count - indexed_count(conn, key) > TAIL_TO_INDEX:
            self._indexer.request(key)

    def _index_text_chunk(self, key: int) -> int:
        """One chunk of the indexer's work (see TextIndexer); returns the events left."""
        if not getattr(self._indexer_sync, "relaxed", False):
            # The index and its mark commit together, and the WAL is written in order: a
            # power loss can only take both back, never one, and the indexer redoes them.
            # So this thread's commits need no fsync of their own, whatever the durability.
            with self._errors(), self._lent() as conn:
                conn.execute("PRAGMA synchronous=NORMAL")
            self._indexer_sync.relaxed = True
        with self._writing() as conn:
            return index_chunk(conn, key)

    def index_text(self, conversation_id: str | None = None) -> int:
        """Bring the text index up to date now, for one conversation or all of them, in this
        thread (the indexer does it in the background after searches); returns the number of
        events indexed. Maintenance, not in the EventStore protocol: the benchmark uses it."""
        with self._errors(), self._lent() as conn:
            if conversation_id is None:
                keys = [row[0] for row in conn.execute("SELECT key FROM conversations")]
            else:
                keys = [self._key(conn, conversation_id)]
        done = 0
        for key in keys:
            while True:
                with self._writing() as conn:
                    before = indexed_count(conn, key)
                    left = index_chunk(conn, key)
                    done += indexed_count(conn, key) - before
                if left <= 0:
                    break
        return done

    def text_index_lag(self, conversation_id: str) -> int:
        """How many events of the conversation the text index does not hold yet (searches
        scan them); 0 when it is caught up."""
        with self._reading() as conn:
            key, event_count, _ = self._conversation_row(conn, conversation_id)
            return event_count - indexed_count(conn, key)

    def _branch(
        self, conn: sqlite3.Connection, conversation_id: str, key: int, query: EventQuery
    ) -> list[tuple[int, int, int]] | None:
        """The path segments of the query's branch head (None without one), down to its
        ``after_seq``: segments below it cannot hold a match."""
        if query.branch_head is None:
            return None
        start = self._event_position(conn, conversation_id, key, query.branch_head)
        floor = -1 if query.after_seq is None else query.after_seq
        return list(path_segments(conn, key, start, floor))

    # -- live -------------------------------------------------------------------------------

    def subscribe(
        self,
        conversation_id: str,
        after_seq: int = -1,
        *,
        poll_interval: float = 0.05,
        stop: threading.Event | None = None,
    ) -> Generator[StoredEvent, None, None]:
        """Events after ``after_seq``, then new ones as any thread or process appends them.

        Rows are read by ``seq > last yielded`` (no duplicate); commits are atomic and seqs
        gap-free, so no gap either. ``data_version`` is read before each read of rows, so an
        append committed after that read changes it and is never waited past. Close the
        generator, or set ``stop`` from another thread, to stop.
        """
        with self._errors(), self._lent() as conn:
            key = self._key(conn, conversation_id)  # fail now, not at the first next()
        return self._follow(key, after_seq, poll_interval, stop or threading.Event())

    def _follow(
        self, key: int, after_seq: int, poll_interval: float, stop: threading.Event
    ) -> Generator[StoredEvent, None, None]:
        # A connection of its own: data_version only moves for commits of *other* connections,
        # and this thread's connection may be the one appending.
        holder = _Connection(self._connect())
        with self._registry_lock:
            self._subscriptions.add(holder)
        conn = holder.conn
        last = after_seq

        def query(sql: str, parameters: tuple[int, ...] = ()) -> list[Any]:
            # Under ``in_use``, and only while the store is open: ``close`` closes this
            # connection from its own thread, never under a statement running here.
            with holder.in_use:
                if self._closed:
                    raise _SubscriptionClosed
                return conn.execute(sql, parameters).fetchall()

        try:
            while not self._closed and not stop.is_set():
                version = query("PRAGMA data_version")[0][0]
                rows = query(
                    "SELECT seq, payload FROM events WHERE conversation = ? AND seq > ? "
                    "ORDER BY seq LIMIT ?",
                    (key, last, _SUBSCRIBE_BATCH),
                )
                for row in rows:
                    stored = _stored(row, self.path)
                    last = stored.seq
                    yield stored
                if len(rows) == _SUBSCRIBE_BATCH:
                    continue  # more are stored already: read on before waiting
                while not self._closed:
                    if stop.wait(poll_interval):
                        return
                    # a removed or replaced file gets no more events: say so, don't idle
                    self._check_file()
                    if query("PRAGMA data_version")[0][0] != version:
                        break
                if not query("SELECT 1 FROM conversations WHERE key = ?", (key,)):
                    return  # the conversation was deleted: nothing more will come
        except _SubscriptionClosed:
            return  # the store closed: end quietly
        except sqlite3.ProgrammingError:
            if not self._closed:
                raise  # closed under us by store.close(): end quietly
        finally:
            with self._registry_lock:
                self._subscriptions.discard(holder)
            if holder.generation == _fork_generation:
                with holder.in_use:
                    conn.close()

    # -- maintenance (not in the EventStore protocol; used by the CLI and the benchmark) -----

    def integrity_check(self) -> list[str]:
        """SQLite's own check of the file: [] when sound, else its findings."""
        try:
            with self._errors(), self._lent() as conn:
                rows = conn.execute("PRAGMA integrity_check").fetchall()
        except StoreError as error:
            if isinstance(error.__cause__, sqlite3.OperationalError):
                raise  # busy or closed: no finding about the file
            return [str(error.__cause__ or error)]
        findings = [str(row[0]) for row in rows]
        return [] if findings == ["ok"] else findings

    def checkpoint(self) -> None:
        """Copy the WAL into the main file and truncate it (the file then holds everything)."""
        with self._errors(), self._lent() as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def file_size(self) -> int:
        """Bytes of the store file plus its WAL."""
        wal = self.path.with_name(self.path.name + "-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


# -- helpers -----------------------------------------------------------------------------------


_AUDIT_FACTS_SQL = (
    "SELECT e.seq, e.id, e.parent_seq, CASE WHEN e.parent_seq >= 0 AND e.parent_seq < ?2 THEN "
    "(SELECT p.id FROM events p WHERE p.conversation = e.conversation AND p.seq = e.parent_seq) "
    "END, e.kind, e.source, "
    f"CASE WHEN e.kind IN {LINK_KINDS!s} THEN json_extract(e.payload, '$.tool_call_id') END, "
    f"CASE WHEN e.kind IN {LINK_KINDS!s} THEN json_extract(e.payload, '$.tool_name') END, "
    f"CASE WHEN e.kind IN {LINK_KINDS!s} THEN json_extract(e.payload, '$.action_id') END, "
    "CASE WHEN e.kind = 'action' THEN json_extract(e.payload, '$.llm_response_id') END, "
    "CASE WHEN e.kind = 'action' THEN json_extract(e.payload, '$.thought') <> '' "
    "OR ifnull(json_extract(e.payload, '$.reasoning'), '') <> '' END, "
    "CASE WHEN e.kind = 'condensation' THEN json_extract(e.payload, '$.forgotten_event_ids') END "
    "FROM events e WHERE e.conversation = ?1 AND e.seq >= ?2 AND e.seq < ?3 ORDER BY e.seq"
)
"""``audit_facts``: columns, and the link fields of actions and results read from the
payload by SQLite's JSON functions (one parse per row: SQLite caches the parsed payload)."""


def _decode(payload: str, path: Path, seq: int | None = None) -> Event:
    return read_payload(payload, str(path), seq)


def _stored(row: Sequence[Any], path: Path) -> StoredEvent:
    seq = int(row[0])
    return StoredEvent(seq=seq, event=_decode(row[1], path, seq), payload=row[1])


def _conversation_info(row: Sequence[Any]) -> ConversationInfo:
    return conversation_info(row, datetime.fromisoformat)


__all__ = [
    "DURABILITY_MODES",
    "SqliteEventStore",
    "connection_pragmas",
    "read_schema_version",
    "schema_version",
]
