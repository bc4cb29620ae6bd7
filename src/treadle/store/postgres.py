"""The PostgreSQL ``EventStore``: row-locked appends, reads by path segments, LISTEN/NOTIFY.

Several processes and servers can share one store; a conversation's row lock orders its appends.
URL, sessions and schema are in ``postgres_schema``, the SQL of reads in ``postgres_sql``.

Paths use the chain segments of ``append_plan.assign_branches`` (as the SQLite backend does): a path
is one index range scan per fork on it, so a window costs O(k) and a branch-filtered page reads
only its page. A recursive walk of parent_seq measured far slower at 100,000 events (an
ascending branch page and a branch count walked the whole path, ~0.3 s each).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg
from psycopg import errors, sql
from psycopg.pq import TransactionStatus

from treadle.data.ids import new_id
from treadle.errors import AppendError
from treadle.events.audit_facts import AuditFacts
from treadle.events.branches import BranchSummary, Line, Node
from treadle.events.model import ROOT, Event, event_to_json
from treadle.store.append_plan import (
    PlannedEvent,
    assign_branches,
    ids_to_look_up,
    moved_head,
    plan_append,
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
    shapes_from_rows,
)
from treadle.store.branch_rows import summary_from_index
from treadle.store.bulk_appends import is_bulk
from treadle.store.checks import check_conversation_id, check_text
from treadle.store.conversation_rows import conversation_info, metadata_json
from treadle.store.paging import check_query, page_of
from treadle.store.payloads import read_payload
from treadle.store.postgres_schema import (
    APPLICATION,
    DEFAULT_SCHEMA,
    DURABILITY_MODES,
    MIGRATIONS,
    SCHEMA_VERSION,
    parse_postgres_url,
    prepare_schema,
)
from treadle.store.postgres_sessions import (
    DEFAULT_RECONNECT_S,
    Pool,
    Unreachable,
    connect,
    store_error,
)
from treadle.store.postgres_sql import (
    NO_LIMIT,
    PATH_RANGE_SQL,
    filters_of,
    only_cursors,
    page_sql,
    path_segments,
)
from treadle.store.postgres_text import (
    ORDERED_PROBE,
    TEXT_INDEX_CAP,
    has_text_index,
    merge_pending,
    text_index_scans,
    uses_text_index,
)
from treadle.store.status_columns import STATUS_COLUMNS, STATUS_UPDATE, status_params
from treadle.store.usage_totals import USAGE_COLUMNS, USAGE_UPDATE, batch_usage

_SUBSCRIBE_BATCH = 500
_MAX_TAILS = 10_000
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)

_CONVERSATION_COLUMNS = (
    "id, title, created_at, updated_at, head_id, event_count, metadata::text, "
    f"{USAGE_COLUMNS}, {STATUS_COLUMNS}"
)

P = ParamSpec("P")
T = TypeVar("T")


def _retried(
    method: Callable[Concatenate[PostgresEventStore, P], T],
) -> Callable[Concatenate[PostgresEventStore, P], T]:
    """Run ``method`` again on a fresh connection when its connection was lost: for reads and
    for writes that may be repeated (their second run leaves what one run leaves)."""

    @functools.wraps(method)
    def retried(self: PostgresEventStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except Unreachable as error:
            return self._pool.retry(lambda: method(self, *args, **kwargs), first=error)

    return retried


_TAIL_EVENTS = 32
"""How many of its newest events a tail keeps: a step's first append names as parent the
head, a few events back (a snapshot fact, a side leaf, came after it)."""


@dataclass(frozen=True, slots=True)
class _Tail:
    """Where this store's last append to a conversation left it: enough to plan the next
    append without reading first, when nobody else appended in between.

    ``recent`` holds the newest events this store wrote there (id → seq, branch), the last
    one included; ``tips`` the highest seq of each of their branches. Both are exact while
    the tail is current: every event since was this store's own (another writer's append
    takes the seq the plan uses, and the write is then refused and checked again)."""

    key: int
    count: int
    recent: dict[str, tuple[int, int]]
    tips: dict[int, int]

    def after(self, count: int, written: list[tuple[str, int, int]]) -> _Tail:
        """The tail once ``written`` (id, seq, branch; in seq order) is stored, ``count``
        events in all: the newest ``_TAIL_EVENTS`` events kept, with their branches' tips."""
        recent = dict(self.recent)
        tips = dict(self.tips)
        for event_id, seq, branch in written:
            recent[event_id] = (seq, branch)
            tips[branch] = seq
        if len(recent) > _TAIL_EVENTS:
            # inserted in seq order (every written id is new): the newest are the last ones
            recent = dict(list(recent.items())[-_TAIL_EVENTS:])
            branches = {branch for _seq, branch in recent.values()}
            tips = {branch: tip for branch, tip in tips.items() if branch in branches}
        return _Tail(self.key, count, recent, tips)


class _NeedsLookup(Exception):
    """A plan from the tail alone would need stored facts it does not have."""


def _head_value(expect_head: str) -> str | None:
    """The stored ``head_id`` an append's ``expect_head`` names (``ROOT``: none)."""
    return None if expect_head == ROOT else expect_head


def _plan_after(
    conversation_id: str, events: list[Event], tail: _Tail
) -> tuple[list[PlannedEvent], list[int]] | None:
    """The append planned from ``tail`` alone, or None when that takes the database: a parent
    other than the last event, a fork from an older event, or a refusal (which the checked
    path then states with what is stored)."""
    if not events:
        return None

    def tip_of(branch: int) -> int:
        if branch not in tail.tips:
            raise _NeedsLookup
        return tail.tips[branch]

    try:
        # An id of the batch among the recent ones, or a parent not among them: the checked
        # path says which (APPEND-DUP-ID, APPEND-NO-PARENT) or finds the parent stored.
        planned = plan_append(
            conversation_id,
            events,
            next_seq=tail.count,
            stored={event_id: seq for event_id, (seq, _branch) in tail.recent.items()},
        )
        branches = assign_branches(
            planned,
            branch_of=dict(tail.recent.values()),
            tip_of=tip_of,
        )
    except (AppendError, _NeedsLookup, KeyError):
        return None
    return planned, branches


class _Listener:
    """A subscription's own connection (LISTEN is per session), locked while in use."""

    __slots__ = ("busy", "conn")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.busy = threading.Lock()


class PostgresEventStore:
    """``EventStore`` over one schema of a PostgreSQL database (see ``parse_postgres_url``)."""

    def __init__(
        self,
        url: str,
        *,
        durability: str | None = None,
        create: bool = True,
        reconnect_s: float = DEFAULT_RECONNECT_S,
    ) -> None:
        """``durability`` overrides the URL's (``open_store(url, durability=...)``); with
        ``create`` False a missing store is an error instead of being made (reading commands);
        ``reconnect_s``: how long an operation whose connection broke tries to reach
        PostgreSQL again before it raises StoreUnavailable."""
        self.url = url
        self._conninfo, self.schema, self.durability = parse_postgres_url(url)
        if durability is not None:
            if durability not in DURABILITY_MODES:
                raise StoreError(f"durability {durability!r} is unknown; use {DURABILITY_MODES}")
            self.durability = durability
        self._pool = Pool(self._connect, reconnect_s=reconnect_s)
        self._listeners: set[_Listener] = set()
        # Read and written whole under the GIL; a stale tail only costs the checked path.
        self._tails: dict[str, _Tail] = {}
        self._listeners_lock = threading.Lock()
        try:
            with self._pool.connection() as conn:
                prepare_schema(conn, self.schema, create=create)
                self._text_index = has_text_index(conn)
        except BaseException:
            self._pool.close()
            raise

    # -- connections ----------------------------------------------------------------------

    def _connect(self, role: str = "store") -> psycopg.Connection[Any]:
        return connect(self._conninfo, self.schema, self.durability, role)

    def _channel(self, conversation_id: str) -> str:
        # NOTIFY channels are identifiers of at most 63 bytes and shared by the whole database:
        # a digest of (schema, conversation) fits any id and keeps other schemas' traffic apart.
        digest = hashlib.sha1(f"{self.schema}\0{conversation_id}".encode()).hexdigest()
        return f"treadle_{digest}"

    def close(self) -> None:
        self._pool.close()
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            # A subscriber suspended at a yield is closed here; one inside a query or a wait
            # owns its connection and ends by itself within poll_interval (pool.closed).
            if listener.busy.acquire(blocking=False):
                try:
                    listener.conn.close()
                finally:
                    listener.busy.release()

    def __enter__(self) -> PostgresEventStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- conversations --------------------------------------------------------------------

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

        def insert(again: bool) -> ConversationInfo:
            with self._pool.connection() as conn:
                row = conn.execute(
                    "INSERT INTO conversations (id, title, created_at, updated_at, metadata) "
                    "VALUES (%s, %s, now(), now(), %s) ON CONFLICT (id) DO NOTHING "
                    f"RETURNING key, {_CONVERSATION_COLUMNS}",
                    (conversation_id, title, metadata_text),
                ).fetchone()
                if row is None and again:
                    # the attempt whose connection broke may have committed: the row is
                    # ours when it holds exactly what was asked
                    row = conn.execute(
                        f"SELECT key, {_CONVERSATION_COLUMNS} FROM conversations WHERE id = %s "
                        "AND title IS NOT DISTINCT FROM %s AND metadata::text = %s "
                        "AND event_count = 0",
                        (conversation_id, title, metadata_text),
                    ).fetchone()
            if row is None:
                raise ConversationExists(conversation_id)
            # its first append (the system prompt) is then planned without a read
            self._keep_tail(conversation_id, _Tail(row[0], 0, {}, {}))
            return _conversation_info(row[1:])

        try:
            return insert(False)
        except Unreachable as error:
            return self._pool.retry(lambda: insert(True), first=error)

    @_retried
    def get_conversation(self, conversation_id: str) -> ConversationInfo:
        with self._pool.connection() as conn:
            row = conn.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE id = %s",
                (conversation_id,),
            ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return _conversation_info(row)

    @_retried
    def list_conversations(self, *, limit: int = 100, offset: int = 0) -> list[ConversationInfo]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations "
                "ORDER BY created_at, key LIMIT %s OFFSET %s",
                (limit, offset),
            ).fetchall()
        return [_conversation_info(row) for row in rows]

    @_retried
    def update_conversation(
        self,
        conversation_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationInfo:
        check_text("title", title)
        with self._pool.connection() as conn:
            row = conn.execute(
                "UPDATE conversations SET title = coalesce(%s, title), "
                "metadata = coalesce(%s::json, metadata), updated_at = now() "
                f"WHERE id = %s RETURNING {_CONVERSATION_COLUMNS}",
                (title, None if metadata is None else metadata_json(metadata), conversation_id),
            ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return _conversation_info(row)

    def delete_conversation(self, conversation_id: str) -> None:
        try:
            self._delete(conversation_id)
        except Unreachable as error:
            # ConversationNotFound then: the attempt whose connection broke deleted it
            with contextlib.suppress(ConversationNotFound):
                self._pool.retry(lambda: self._delete(conversation_id), first=error)

    def _delete(self, conversation_id: str) -> None:
        with self._pool.connection() as conn, conn.transaction():
            deleted = conn.execute(
                "DELETE FROM conversations WHERE id = %s", (conversation_id,)
            ).rowcount
            self._tails.pop(conversation_id, None)
            if not deleted:
                raise ConversationNotFound(conversation_id)
            # wakes its subscribers, which then find it gone and end
            conn.execute(
                "SELECT pg_notify(%s, %s)",
                (self._channel(conversation_id), json.dumps({"deleted": True})),
            )

    # -- writing --------------------------------------------------------------------------

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
        events = list(events)
        try:
            seqs = self._append(conversation_id, events, move_head, expect_head)
        except Unreachable as error:
            # The connection broke, maybe while the commit was on its way: the events may be
            # stored. They are looked up by id before being appended again, so that nothing
            # is stored twice or lost.
            self._tails.pop(conversation_id, None)
            seqs = self._pool.retry(
                lambda: self._append_again(conversation_id, events, move_head, expect_head),
                first=error,
            )
        if is_bulk(len(events)):
            # A bulk load (an import) leaves its index entries in the pending list, which every
            # search reads row by row: merged now, a search right after it is an index search.
            self.index_text()
        return seqs

    @_retried
    def index_text(self) -> int:
        """Merge the text index's pending entries into the index now (PostgreSQL otherwise
        does it when the pending list fills, or at vacuum); the pages merged. Bulk appends
        call it; maintenance, not in the EventStore protocol."""
        if not self._text_index:
            return 0
        with self._pool.connection() as conn:
            return merge_pending(conn)

    def _append_again(
        self,
        conversation_id: str,
        events: list[Event],
        move_head: bool,
        expect_head: str | None,
    ) -> list[int]:
        """An append whose earlier attempt may have been stored: its seqs if it was."""
        stored = self._appended(conversation_id, events)
        if stored is not None:
            return stored
        try:
            return self._append(conversation_id, events, move_head, expect_head)
        except AppendError as error:
            # the earlier attempt may have committed after the look-up (its backend finished
            # the message it had): then its ids are taken by these very events
            stored = (
                self._appended(conversation_id, events)
                if error.contract == "APPEND-DUP-ID"
                else None
            )
            if stored is None:
                raise
            return stored

    def _appended(self, conversation_id: str, events: list[Event]) -> list[int] | None:
        """The seqs of ``events`` when all are stored as given (same ids and payloads), else
        None. A batch is one transaction: stored whole or not at all."""
        if not events:
            return None
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT e.id, e.seq, e.payload FROM conversations c JOIN events e "
                "ON e.conversation = c.key AND e.id = ANY(%s) WHERE c.id = %s",
                ([event.id for event in events], conversation_id),
            ).fetchall()
        found = {event_id: (seq, payload) for event_id, seq, payload in rows}
        seqs = []
        for event in events:
            seq, payload = found.get(event.id, (None, None))
            if seq is None or payload != event_to_json(event):
                return None
            seqs.append(int(seq))
        return seqs

    def _append(
        self,
        conversation_id: str,
        events: list[Event],
        move_head: bool,
        expect_head: str | None,
    ) -> list[int]:
        # Client-side binding lets several statements travel in one message, each still with
        # its own snapshot, and plans every statement for this call's values (a plan cached
        # while the table was tiny scanned all of a conversation's events per append).
        with self._pool.connection() as conn:
            cursor = psycopg.ClientCursor(conn)
            try:
                tail = self._tails.get(conversation_id)
                planned = None if tail is None else _plan_after(conversation_id, events, tail)
                if tail is not None and planned is not None:
                    try:
                        return self._write(
                            cursor, conversation_id, tail, *planned, move_head, expect_head
                        )
                    except (
                        errors.UniqueViolation,
                        errors.ForeignKeyViolation,
                        errors.InvalidTextRepresentation,
                    ):
                        # Another writer appended (seq taken), the id is taken, the
                        # conversation was deleted, or the head is not the one expected:
                        # nothing was written; check it all below.
                        conn.execute("ROLLBACK")
                        self._tails.pop(conversation_id, None)
                return self._append_checked(cursor, conversation_id, events, move_head, expect_head)
            except BaseException:
                if conn.info.transaction_status in _IN_TRANSACTION:
                    conn.execute("ROLLBACK")
                raise

    def _append_checked(
        self,
        cursor: psycopg.ClientCursor[Any],
        conversation_id: str,
        events: list[Event],
        move_head: bool,
        expect_head: str | None,
    ) -> list[int]:
        """An append that reads what it needs under the lock first (two round trips)."""
        # The row lock is APPEND's one lock: it serialises appenders of this conversation
        # across threads, processes and servers. The look-up is a statement of its own after
        # it: under READ COMMITTED its snapshot is taken once the lock is held, so it sees all
        # the previous holder committed (APPEND step 1). It finds the new ids and explicit
        # parents already stored, and the last event (the legacy parent).
        wanted = ids_to_look_up(events)
        cursor.execute(
            "BEGIN; "
            "SELECT key, event_count, head_id FROM conversations WHERE id = %(c)s FOR UPDATE; "
            "SELECT e.id, e.seq, e.branch FROM conversations c "
            "JOIN events e ON e.conversation = c.key AND e.id = ANY(%(ids)s) WHERE c.id = %(c)s "
            "UNION ALL "
            "SELECT e.id, e.seq, e.branch FROM conversations c "
            "JOIN events e ON e.conversation = c.key AND e.seq = c.event_count - 1 "
            "WHERE c.id = %(c)s",
            {"c": conversation_id, "ids": list(wanted)},
        )
        cursor.nextset()
        row = cursor.fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        key, count, head = row
        if expect_head is not None and head != _head_value(expect_head):
            raise HeadMoved(conversation_id, expect_head, head)
        cursor.nextset()
        found = cursor.fetchall()
        if not events:
            cursor.execute("COMMIT")
            return []
        stored = {event_id: seq for event_id, seq, _ in found if event_id in wanted}
        planned = plan_append(conversation_id, events, next_seq=count, stored=stored)
        branches = assign_branches(
            planned,
            branch_of={seq: branch for _, seq, branch in found},
            tip_of=lambda branch: self._tip(cursor.connection, key, branch),
        )
        # The tail starts from the last stored event (the legacy parent of the next append).
        last = [(event_id, seq, branch) for event_id, seq, branch in found if seq == count - 1]
        tail = _Tail(key, count, {}, {}).after(count, last)
        return self._write(
            cursor, conversation_id, tail, planned, branches, move_head, None, begun=True
        )

    def _write(
        self,
        cursor: psycopg.ClientCursor[Any],
        conversation_id: str,
        tail: _Tail,
        planned: list[PlannedEvent],
        branches: list[int],
        move_head: bool,
        expect_head: str | None,
        *,
        begun: bool = False,
    ) -> list[int]:
        """Rows, length, head and notification in one message and one transaction.

        ``tail``: the conversation's as it stands before the write. Not ``begun``: the
        transaction starts here, under the row lock, from what this store's last append left
        (``_plan_after``). The unique (conversation, seq) and (conversation,
        id) keys then check that plan: if another writer appended, seq is taken; if an id is,
        it is a duplicate; a head other than ``expect_head`` fails the lock's statement (a
        cast of a word to a number: the one way a statement of the message can stop the
        rest); either way nothing is written and the caller checks again.
        """
        key, last = tail.key, planned[-1]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(planned))
        rows = [
            (
                *(key, p.seq, p.event.id, p.parent_seq, branch),
                *(p.event.kind, p.event.source, p.time_us, p.payload),
            )
            for p, branch in zip(planned, branches, strict=True)
        ]
        new_head = moved_head([p.event for p in planned], None, move_head=move_head)
        lock_params: tuple[str | None, ...]
        if begun:
            lock, lock_params = "", ()
        elif expect_head is None:
            lock = "BEGIN; SELECT 1 FROM conversations WHERE id = %s FOR UPDATE; "
            lock_params = (conversation_id,)
        else:
            lock = (
                "BEGIN; SELECT CAST(CASE WHEN head_id IS NOT DISTINCT FROM %s THEN '1' "
                "ELSE 'head moved' END AS integer) FROM conversations WHERE id = %s FOR UPDATE; "
            )
            lock_params = (_head_value(expect_head), conversation_id)
        cursor.execute(
            lock + "INSERT INTO events "
            "(conversation, seq, id, parent_seq, branch, kind, source, time_us, payload) "
            f"VALUES {values}; "
            # a head that does not move is left as stored (set_head may have moved it)
            "UPDATE conversations SET event_count = %s, head_id = coalesce(%s, head_id), "
            f"updated_at = now(), {USAGE_UPDATE.format('%s')}, "
            f"{STATUS_UPDATE.format('%s::text')} WHERE key = %s; "
            # delivered at commit, only if it commits: no subscriber sees a rolled-back seq
            "SELECT pg_notify(%s, %s); "
            "COMMIT",
            [
                *lock_params,
                *(value for row in rows for value in row),
                last.seq + 1,
                new_head,
                *batch_usage([p.event for p in planned]),
                *status_params([p.event for p in planned]),
                key,
                self._channel(conversation_id),
                _notice(conversation_id, last.seq),
            ],
        )
        written = [(p.event.id, p.seq, branch) for p, branch in zip(planned, branches, strict=True)]
        self._keep_tail(conversation_id, tail.after(last.seq + 1, written))
        return [p.seq for p in planned]

    def _keep_tail(self, conversation_id: str, tail: _Tail) -> None:
        if len(self._tails) >= _MAX_TAILS:
            self._tails.clear()
        self._tails[conversation_id] = tail

    @_retried
    def set_head(self, conversation_id: str, event_id: str | None) -> None:
        with self._pool.connection() as conn, conn.transaction():
            key = self._key(conn, conversation_id, lock=True)
            if event_id is not None:
                row = conn.execute(
                    "SELECT kind FROM events WHERE conversation = %s AND id = %s", (key, event_id)
                ).fetchone()
                if row is None:
                    raise EventNotFound(conversation_id, event_id)
            conn.execute(
                "UPDATE conversations SET head_id = %s, updated_at = now() WHERE key = %s",
                (event_id, key),
            )

    # -- reading --------------------------------------------------------------------------

    @_retried
    def head(self, conversation_id: str) -> str | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT head_id FROM conversations WHERE id = %s", (conversation_id,)
            ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        head_id: str | None = row[0]
        return head_id

    def event_count(self, conversation_id: str) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT event_count FROM conversations WHERE id = %s", (conversation_id,)
            ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return int(row[0])

    @_retried
    def event_counts(self, conversation_ids: Sequence[str]) -> dict[str, int]:
        if not conversation_ids:
            return {}
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT id, event_count FROM conversations WHERE id = ANY(%s)",
                (list(conversation_ids),),
            ).fetchall()
        return {conversation_id: int(count) for conversation_id, count in rows}

    @_retried
    def get_event(self, conversation_id: str, event_id: str) -> StoredEvent:
        with self._pool.connection() as conn:
            key = self._key(conn, conversation_id)
            row = conn.execute(
                "SELECT seq, payload FROM events WHERE conversation = %s AND id = %s",
                (key, event_id),
            ).fetchone()
        if row is None:
            raise EventNotFound(conversation_id, event_id)
        return _stored(row)

    @_retried
    def shapes(self, conversation_id: str) -> list[EventShape]:
        with self._pool.connection() as conn:
            key = self._key(conn, conversation_id)
            rows = conn.execute(
                "SELECT seq, id, parent_seq, kind FROM events WHERE conversation = %s ORDER BY seq",
                (key,),
            ).fetchall()
        return shapes_from_rows(rows)

    @_retried
    def audit_facts(self, conversation_id: str, start_seq: int, end_seq: int) -> list[AuditFacts]:
        with self._pool.connection() as conn:
            key = self._key(conn, conversation_id)
            # converted as the cursor yields them: the rows are never all Python tuples at once
            return audit_facts_from_rows(
                conn.execute(_AUDIT_FACTS_SQL, {"key": key, "start": start_seq, "end": end_seq}),
                start_seq,
            )

    @_retried
    def audit_seqs(self, conversation_id: str, ids: Sequence[str], end_seq: int) -> dict[str, int]:
        with self._pool.connection() as conn:
            key = self._key(conn, conversation_id)
            rows = conn.execute(
                "SELECT id, seq FROM events WHERE conversation = %s AND id = ANY(%s) AND seq < %s",
                (key, list(ids), end_seq),
            ).fetchall()
        return {event_id: int(seq) for event_id, seq in rows}

    @_retried
    def audit_checkpoint(self, conversation_id: str) -> tuple[int, datetime, bytes] | None:
        with self._pool.connection() as conn:
            key = self._key(conn, conversation_id)
            row = conn.execute(
                "SELECT upto, created_at, state FROM audit_checkpoints WHERE conversation = %s",
                (key,),
            ).fetchone()
        if row is None:
            return None
        return int(row[0]), row[1], bytes(row[2])

    @_retried
    def keep_audit_checkpoint(self, conversation_id: str, upto: int, state: bytes) -> None:
        # Its own short transaction, never an append's; only forward (servers sharing the
        # store may race: the longer prefix stays), for the conversation of that id now.
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO audit_checkpoints (conversation, created_at, upto, state) "
                "SELECT key, created_at, %(upto)s, %(state)s FROM conversations "
                "WHERE id = %(id)s AND event_count >= %(upto)s "
                "ON CONFLICT (conversation) DO UPDATE SET created_at = excluded.created_at, "
                "upto = excluded.upto, state = excluded.state "
                "WHERE audit_checkpoints.upto <= excluded.upto",
                {"id": conversation_id, "upto": upto, "state": state},
            )

    @_retried
    def children(self, conversation_id: str, event_id: str) -> list[StoredEvent]:
        with self._pool.connection() as conn:
            key = self._key(conn, conversation_id)
            rows = conn.execute(
                "SELECT c.seq, c.payload FROM events p JOIN events c ON c.conversation = "
                "p.conversation AND c.parent_seq = p.seq WHERE p.conversation = %s AND p.id = %s "
                "ORDER BY c.seq",
                (key, event_id),
            ).fetchall()
            if (
                not rows
                and conn.execute(
                    "SELECT 1 FROM events WHERE conversation = %s AND id = %s", (key, event_id)
                ).fetchone()
                is None
            ):
                raise EventNotFound(conversation_id, event_id)
        return [_stored(row) for row in rows]

    @_retried
    def branch_summary(self, conversation_id: str) -> BranchSummary:
        """Heads, lines and branch points from the line index: O(branches), no log scan."""
        with self._pool.connection() as conn, conn.transaction():
            key, head = self._key_and_head(conn, conversation_id)
            lines = [
                Line(*row)
                for row in conn.execute(
                    "SELECT line, base, head FROM tree_lines WHERE conversation = %s", (key,)
                )
            ]

            def nodes(seqs: list[int]) -> list[Node]:
                return [
                    Node(*row)
                    for row in conn.execute(
                        "SELECT seq, id, kind, depth, line, time_us FROM events "
                        "WHERE conversation = %s AND seq = ANY(%s)",
                        (key, seqs),
                    )
                ]

            def children(bases: list[int]) -> list[tuple[int, Node]]:
                return [
                    (row[0], Node(*row[1:]))
                    for row in conn.execute(
                        "SELECT parent_seq, seq, id, kind, depth, line, time_us FROM events "
                        "WHERE conversation = %s AND parent_seq = ANY(%s) "
                        "AND kind <> 'state_change' ORDER BY seq",
                        (key, bases),
                    )
                ]

            return summary_from_index(lines, nodes, children, head)

    @_retried
    def get_range(self, conversation_id: str, start_seq: int, end_seq: int) -> list[StoredEvent]:
        with self._pool.connection() as conn:
            key = self._key(conn, conversation_id)
            rows = conn.execute(
                "SELECT seq, payload FROM events WHERE conversation = %s "
                "AND seq >= %s AND seq < %s ORDER BY seq",
                (key, start_seq, end_seq),
            ).fetchall()
        return [_stored(row) for row in rows]

    @_retried
    def path_to_root(
        self, conversation_id: str, head_id: str | None = None, limit: int | None = None
    ) -> list[Event]:
        """The active path root..head (TREE-PATH), or its last ``limit`` events: O(limit)."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        payloads: list[str] = []
        with self._pool.connection() as conn:
            key, stored_head = self._key_and_head(conn, conversation_id)
            head_id = stored_head if head_id is None else head_id
            if head_id is None:
                return []
            # each segment gives at least one event: `limit` segments are enough
            segments = path_segments(conn, conversation_id, key, head_id, most=limit)
            for branch, first, last in segments:
                wanted = None if limit is None else limit - len(payloads)
                if wanted == 0:
                    break
                rows = conn.execute(
                    PATH_RANGE_SQL,
                    {"key": key, "branch": branch, "first": first, "last": last, "limit": wanted},
                ).fetchall()
                payloads.extend(payload for (payload,) in rows)
        payloads.reverse()
        return [read_payload(payload, "PostgreSQL") for payload in payloads]

    @_retried
    def search(self, conversation_id: str, query: EventQuery) -> EventPage:
        check_query(query)
        fetch = query.limit + 1
        with self._pool.connection() as conn:
            key, event_count = self._key_and_count(conn, conversation_id)
            if not (self._text_index and uses_text_index(query)):
                rows = self._page(conn, conversation_id, key, query, fetch)
            else:
                rows = self._text_page(conn, conversation_id, key, event_count, query, fetch)
        return page_of([_stored(row) for row in rows[:fetch]], query.limit)

    def _text_page(
        self,
        conn: psycopg.Connection[Any],
        conversation_id: str,
        key: int,
        event_count: int,
        query: EventQuery,
        fetch: int,
    ) -> list[tuple[int, str]]:
        """A page of a text search with the trigram index (postgres_text). Three steps,
        each bounded, so that neither a frequent nor a rare needle reads the whole log:

        1. the first ORDERED_PROBE events of the range in page order, as for any filter (a
           frequent needle fills the page there);
        2. else the index's matches in the rest of the range, at most TEXT_INDEX_CAP of
           them, sorted (a rare needle: that is all of them, the page is exact);
        3. else (more matches than that: matches are dense enough) the rest in page order.
        """
        low = -1 if query.after_seq is None else query.after_seq
        high = event_count if query.before_seq is None else query.before_seq
        if query.order == "asc":
            cut = min(high, low + ORDERED_PROBE + 1)
            probe = dataclasses.replace(query, before_seq=cut)
            rest = dataclasses.replace(query, after_seq=cut - 1)
            rest_is_empty = cut >= high
        else:
            cut = max(low, high - ORDERED_PROBE - 1)
            probe = dataclasses.replace(query, after_seq=cut)
            rest = dataclasses.replace(query, before_seq=cut + 1)
            rest_is_empty = cut <= low
        rows = self._page(conn, conversation_id, key, probe, fetch)
        if len(rows) >= fetch or rest_is_empty:
            return rows
        with text_index_scans(conn):
            matches = self._index_matches(conn, conversation_id, key, rest, fetch - len(rows))
        if matches is None:
            matches = self._page(conn, conversation_id, key, rest, fetch - len(rows))
        return rows + matches

    @staticmethod
    def _index_matches(
        conn: psycopg.Connection[Any],
        conversation_id: str,
        key: int,
        query: EventQuery,
        fetch: int,
    ) -> list[tuple[int, str]] | None:
        """The first ``fetch`` matches of ``query`` in page order, from the trigram index
        (inside ``text_index_scans``); None when more than TEXT_INDEX_CAP events match. A
        branch's path is kept in the same statement (a statement per segment would search
        the index again for each fork)."""
        filters, params = filters_of(query)
        params.update(key=key, fetch=fetch, cap=TEXT_INDEX_CAP + 1)
        on_path = ""
        if query.branch_head is not None:
            segments = path_segments(
                conn, conversation_id, key, query.branch_head, floor=query.after_seq
            )
            on_path = (
                " AND EXISTS (SELECT 1 FROM unnest(%(branches)s::bigint[], "
                "%(firsts)s::bigint[], %(lasts)s::bigint[]) AS s (branch, first, last) "
                "WHERE events.branch = s.branch AND events.seq BETWEEN s.first AND s.last)"
            )
            params.update(
                branches=[segment[0] for segment in segments],
                firsts=[segment[1] for segment in segments],
                lasts=[segment[2] for segment in segments],
            )
        order = "DESC" if query.order == "desc" else "ASC"
        rows = conn.execute(
            "SELECT seq, payload, count(*) OVER () FROM (SELECT seq, payload FROM events "
            f"WHERE conversation = %(key)s{filters}{on_path} LIMIT %(cap)s) AS matches "
            f"ORDER BY seq {order} LIMIT %(fetch)s",
            params,
        ).fetchall()
        if rows and rows[0][2] > TEXT_INDEX_CAP:
            return None
        return [(row[0], row[1]) for row in rows]

    @staticmethod
    def _page(
        conn: psycopg.Connection[Any],
        conversation_id: str,
        key: int,
        query: EventQuery,
        fetch: int,
    ) -> list[tuple[int, str]]:
        """Up to ``fetch`` rows of ``query`` in page order."""
        filters, params = filters_of(query)
        order = "DESC" if query.order == "desc" else "ASC"
        params.update(key=key, fetch=fetch)
        if query.branch_head is None:
            return conn.execute(page_sql(query, filters, order), params).fetchall()
        rows: list[tuple[int, str]] = []
        segments = path_segments(
            conn, conversation_id, key, query.branch_head, floor=query.after_seq
        )
        if query.order == "asc":
            segments.reverse()
        for branch, first, last in segments:
            rows.extend(
                conn.execute(
                    "SELECT seq, payload FROM events WHERE conversation = %(key)s "
                    f"AND branch = %(branch)s AND seq BETWEEN %(first)s AND %(last)s"
                    f"{filters} ORDER BY seq {order} LIMIT %(fetch)s",
                    {**params, "branch": branch, "first": first, "last": last},
                ).fetchall()
            )
            if len(rows) >= fetch:
                break
        return rows

    @_retried
    def count(self, conversation_id: str, query: EventQuery) -> int:
        check_query(query)
        filters, params = filters_of(query)
        with self._pool.connection() as conn, contextlib.ExitStack() as scans:
            key, event_count = self._key_and_count(conn, conversation_id)
            params["key"] = key
            if self._text_index and uses_text_index(query):
                # a count reads every match: through the trigram index, not every event
                scans.enter_context(text_index_scans(conn))
            if query.branch_head is None:
                if only_cursors(query):
                    # seqs are gap-free from 0: the cursors alone give the count
                    low = -1 if query.after_seq is None else max(query.after_seq, -1)
                    high = event_count
                    if query.before_seq is not None:
                        high = min(high, query.before_seq)
                    return max(0, high - low - 1)
                row = conn.execute(
                    f"SELECT count(*) FROM events WHERE conversation = %(key)s{filters}", params
                ).fetchone()
            else:
                segments = path_segments(
                    conn, conversation_id, key, query.branch_head, floor=query.after_seq
                )
                # a count per segment, as a subquery the planner cannot turn into a join
                # over the whole conversation
                row = conn.execute(
                    "SELECT coalesce(sum((SELECT count(*) FROM events "
                    "WHERE conversation = %(key)s AND branch = s.branch "
                    f"AND seq BETWEEN s.first AND s.last{filters})), 0) "
                    "FROM unnest(%(branches)s::bigint[], %(firsts)s::bigint[], "
                    "%(lasts)s::bigint[]) AS s (branch, first, last)",
                    {
                        **params,
                        "branches": [segment[0] for segment in segments],
                        "firsts": [segment[1] for segment in segments],
                        "lasts": [segment[2] for segment in segments],
                    },
                ).fetchone()
        return int(row[0]) if row else 0

    @_retried
    def subscribe(
        self,
        conversation_id: str,
        after_seq: int = -1,
        *,
        poll_interval: float = 0.05,
        stop: threading.Event | None = None,
        on_live: Callable[[dict[str, Any]], None] | None = None,
    ) -> Generator[StoredEvent, None, None]:
        """Stored events after ``after_seq``, then new ones as any process appends them;
        ``on_live`` is handed each live frame any process publishes meanwhile
        (``publish_live``), in the subscriber's thread.

        LISTEN comes before the first read, so an append either is in that read or notifies
        after it: no gap. Rows are read by ``seq > last yielded``: no duplicate. A notification
        wakes the reader at once; ``poll_interval`` bounds the wait only as a safety net (and
        how long ``stop``, set from another thread, takes to end it and close its connection).
        """
        with self._pool.connection() as conn:
            key = self._key(conn, conversation_id)  # fail now, not at the first next()
        return self._follow(conversation_id, key, after_seq, poll_interval, stop, on_live)

    def publish_live(self, conversation_id: str, frame: dict[str, Any]) -> None:
        """Hand a live frame (never stored) to every process that follows the conversation,
        this one included, on its channel: a notification of at most ``LIVE_PAYLOAD_BYTES``
        (a longer frame's ``text`` keeps its end, and its ``offset`` moves on). One try: a
        frame that cannot go now is dropped (StoreError/Unreachable say why)."""
        payload = _live_payload(frame)
        with self._pool.connection() as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (self._channel(conversation_id), payload))

    def _follow(
        self,
        conversation_id: str,
        key: int,
        after_seq: int,
        poll_interval: float,
        stop: threading.Event | None,
        on_live: Callable[[dict[str, Any]], None] | None = None,
    ) -> Generator[StoredEvent, None, None]:
        listener = _Listener(self._listen(conversation_id))
        with self._listeners_lock:
            self._listeners.add(listener)
        last = after_seq
        waited = False
        try:
            while not self._pool.closed and not (stop is not None and stop.is_set()):
                try:
                    with listener.busy:
                        rows = listener.conn.execute(
                            "SELECT seq, payload FROM events WHERE conversation = %s "
                            "AND seq > %s ORDER BY seq LIMIT %s",
                            (key, last, _SUBSCRIBE_BATCH),
                        ).fetchall()
                    newer = False
                    if rows and on_live is not None:
                        # Live frames that came while the rows were read were published
                        # before them (a call's output goes out before its result is stored):
                        # pass them on first, so a client sees the output before the result.
                        with listener.busy:
                            newer = _pass_on_live(listener.conn, on_live, rows[-1][0])
                    for row in rows:
                        stored = _stored(row)
                        last = stored.seq
                        yield stored
                    if newer or len(rows) == _SUBSCRIBE_BATCH:
                        continue  # more rows are stored already: read on before waiting
                    with listener.busy:
                        if not rows and waited and not self._exists(listener.conn, key):
                            return  # the conversation was deleted: nothing more will come
                        for notice in listener.conn.notifies(timeout=poll_interval):
                            live = _live_frame(notice.payload)
                            if live is not None:
                                if on_live is not None:
                                    on_live(live)
                                continue
                            if _notice_seq(notice.payload) > last:
                                break  # stale notices (rows already read) keep us waiting
                    waited = True
                except psycopg.Error as error:
                    if self._pool.closed:
                        return  # the store closing under us ends the stream quietly
                    if not (listener.conn.broken or listener.conn.closed):
                        raise store_error(error) from error
                    # Listen again on a fresh connection, then read on after `last`: LISTEN
                    # comes before that read, so nothing is missed and nothing repeated.
                    lost = Unreachable(f"the subscription lost its PostgreSQL connection ({error})")
                    try:
                        conn = self._pool.retry(lambda: self._listen(conversation_id), first=lost)
                    except Unreachable as failure:
                        if self._pool.closed:
                            return
                        raise Unreachable(
                            f"{failure}; subscribe again after seq {last} to go on without a gap"
                        ) from failure
                    with listener.busy:
                        listener.conn.close()
                        listener.conn = conn
        finally:
            with self._listeners_lock:
                self._listeners.discard(listener)
            listener.conn.close()

    def _listen(self, conversation_id: str) -> psycopg.Connection[Any]:
        """A subscription's own connection (LISTEN is per session), listening to the
        conversation's channel; Unreachable when PostgreSQL cannot be reached."""
        conn = self._connect("subscribe")
        try:
            channel = sql.Identifier(self._channel(conversation_id))
            conn.execute(sql.SQL("LISTEN {}").format(channel))
        except psycopg.Error as error:
            conn.close()
            raise Unreachable(f"cannot listen for new events ({error})") from error
        return conn

    # -- maintenance (not in the EventStore protocol; used by `treadle store check`) ----------

    @_retried
    def integrity_check(self) -> list[str]:
        """The store's own invariants, checked in the database: [] when they hold.

        Per conversation: rows gap-free from seq 0 and as many as its count, the head one of its
        events; per event: a parent that precedes it, a segment that starts at or before it.
        """
        findings: list[str] = []
        with self._pool.connection() as conn, conn.transaction():
            # whole-table checks: here a scan is the right plan
            conn.execute("SET LOCAL enable_seqscan = on")
            conn.execute("SET LOCAL enable_bitmapscan = on")
            for conversation_id, count, rows, last in conn.execute(
                "SELECT c.id, c.event_count, count(e.seq), coalesce(max(e.seq), -1) "
                "FROM conversations c LEFT JOIN events e ON e.conversation = c.key "
                "GROUP BY c.key, c.id, c.event_count HAVING c.event_count <> count(e.seq) "
                "OR coalesce(max(e.seq), -1) <> c.event_count - 1"
            ):
                findings.append(
                    f"conversation {conversation_id!r} counts {count} events but holds {rows} "
                    f"rows up to seq {last}"
                )
            for conversation_id, head_id in conn.execute(
                "SELECT c.id, c.head_id FROM conversations c WHERE c.head_id IS NOT NULL AND "
                "NOT EXISTS (SELECT 1 FROM events e WHERE e.conversation = c.key "
                "AND e.id = c.head_id)"
            ):
                findings.append(
                    f"conversation {conversation_id!r} has head {head_id!r}, not one of its events"
                )
            for conversation_id, event_id, seq in conn.execute(
                "SELECT c.id, e.id, e.seq FROM events e JOIN conversations c ON c.key = "
                "e.conversation LEFT JOIN events p ON p.conversation = e.conversation "
                "AND p.seq = e.parent_seq WHERE e.branch > e.seq OR (e.parent_seq IS NOT NULL "
                "AND (e.parent_seq >= e.seq OR p.seq IS NULL)) ORDER BY c.id, e.seq LIMIT 100"
            ):
                findings.append(
                    f"event {event_id!r} (seq {seq}) of conversation {conversation_id!r} has a "
                    "parent or segment that does not precede it"
                )
        return findings

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def _key(conn: psycopg.Connection[Any], conversation_id: str, *, lock: bool = False) -> int:
        row = conn.execute(
            "SELECT key FROM conversations WHERE id = %s" + (" FOR UPDATE" if lock else ""),
            (conversation_id,),
        ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return int(row[0])

    @staticmethod
    def _key_and_head(
        conn: psycopg.Connection[Any], conversation_id: str
    ) -> tuple[int, str | None]:
        row = conn.execute(
            "SELECT key, head_id FROM conversations WHERE id = %s", (conversation_id,)
        ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return int(row[0]), row[1]

    @staticmethod
    def _key_and_count(conn: psycopg.Connection[Any], conversation_id: str) -> tuple[int, int]:
        row = conn.execute(
            "SELECT key, event_count FROM conversations WHERE id = %s", (conversation_id,)
        ).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return int(row[0]), int(row[1])

    @staticmethod
    def _exists(conn: psycopg.Connection[Any], key: int) -> bool:
        return (
            conn.execute("SELECT 1 FROM conversations WHERE key = %s", (key,)).fetchone()
            is not None
        )

    @staticmethod
    def _tip(conn: psycopg.Connection[Any], key: int, branch: int) -> int:
        row = conn.execute(
            "SELECT max(seq) FROM events WHERE conversation = %s AND branch = %s", (key, branch)
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else -1


def _notice(conversation_id: str, last_seq: int) -> str:
    # NOTIFY payloads are capped at 8000 bytes; the channel already names the conversation.
    body: dict[str, Any] = {"seq": last_seq}
    if len(conversation_id) <= 1000:
        body["conversation"] = conversation_id
    return json.dumps(body)


LIVE_PAYLOAD_BYTES = 7900
"""A live frame's notification at most (PostgreSQL refuses payloads of 8000 bytes or more)."""


def _live_payload(frame: dict[str, Any]) -> str:
    """``{"live": frame}`` within ``LIVE_PAYLOAD_BYTES``: the text keeps its newest part."""
    text = str(frame.get("text", ""))
    while True:
        payload = json.dumps({"live": {**frame, "text": text}})
        if len(payload.encode()) <= LIVE_PAYLOAD_BYTES or not text:
            return payload
        cut = max(1, len(text) // 4)
        text = text[cut:]
        frame = {**frame, "offset": int(frame.get("offset", 0)) + cut}


def _live_frame(payload: str) -> dict[str, Any] | None:
    """The live frame a notification carries, or None (an append's or a deletion's)."""
    if not payload.startswith('{"live"'):
        return None
    try:
        live = json.loads(payload)["live"]
    except (ValueError, KeyError, TypeError):
        return None
    return live if isinstance(live, dict) else None


def _pass_on_live(
    conn: psycopg.Connection[Any], on_live: Callable[[dict[str, Any]], None], read_to: int
) -> bool:
    """Hand ``on_live`` the live frames already received on ``conn``, without waiting; True
    when a notice of a row after ``read_to`` came too (read on before waiting)."""
    newer = False
    for notice in conn.notifies(timeout=0):
        live = _live_frame(notice.payload)
        if live is not None:
            on_live(live)
        elif _notice_seq(notice.payload) > read_to:
            newer = True
    return newer


def _notice_seq(payload: str) -> int:
    try:
        return int(json.loads(payload)["seq"])
    except (ValueError, KeyError, TypeError):
        return NO_LIMIT  # not ours to judge: read the table


_AUDIT_FACTS_SQL = (
    "SELECT e.seq, e.id, e.parent_seq, CASE WHEN e.parent_seq < %(start)s THEN "
    "(SELECT p.id FROM events p WHERE p.conversation = e.conversation AND p.seq = e.parent_seq) "
    "END, e.kind, e.source, j.tool_call_id, j.tool_name, j.action_id, j.llm_response_id, "
    "CASE WHEN e.kind = 'action' THEN coalesce(j.thought, '') <> '' "
    "OR coalesce(j.reasoning, '') <> '' END, "
    "CASE WHEN e.kind = 'condensation' THEN (e.payload::json -> 'forgotten_event_ids')::text END "
    "FROM events e CROSS JOIN LATERAL json_to_record("
    f"CASE WHEN e.kind IN {LINK_KINDS!s} THEN e.payload::json END) AS j(tool_call_id text, "
    "tool_name text, action_id text, llm_response_id text, thought text, reasoning text) "
    "WHERE e.conversation = %(key)s AND e.seq >= %(start)s AND e.seq < %(end)s ORDER BY e.seq"
)
"""``audit_facts``: columns, and the link fields of actions and results (their payload parsed
once per row by a function in FROM: a ``->>`` per field would parse it once per field)."""


def _stored(row: Sequence[Any]) -> StoredEvent:
    seq = int(row[0])
    return StoredEvent(seq=seq, event=read_payload(row[1], "PostgreSQL", seq), payload=row[1])


def _conversation_info(row: Sequence[Any]) -> ConversationInfo:
    return conversation_info(row, _utc)


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


__all__ = [
    "APPLICATION",
    "DEFAULT_SCHEMA",
    "DURABILITY_MODES",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresEventStore",
    "parse_postgres_url",
]
