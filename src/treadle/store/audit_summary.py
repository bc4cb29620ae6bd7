"""The audit summary a store keeps per conversation: the latest checkpoint of its
``IncrementalAudit`` (``treadle.events.audit_checkpoint``), so that the first audit of a large
conversation in a fresh process restores it and walks only the events appended since, instead
of reading and walking the whole log.

One row per conversation in ``audit_checkpoints`` (a schema step of each backend, below): the
seq the checkpoint covers (``upto``: the audit of events ``0 <= seq < upto``), the
conversation's ``created_at`` (a deleted and re-created conversation never meets the old
row; the delete removes it too) and the checkpoint's bytes. The append never touches it: an
audit that has walked at least ``KEEP_EVERY`` events since it was restored or kept writes a
newer one, in a
transaction of its own, and only forward (a row of a longer prefix is never replaced by a
shorter one). A checkpoint is a function of an immutable prefix of an append-only log, so
processes and servers sharing a store may each write one, in any order: every row is right.

A store made by an older Treadle gets the empty table by its migration; each conversation's
row is made by its first audit (which walks the whole log once, as before) and kept from then.

An import is the exception to "never the append's work": it holds the whole log it stored in
memory, so it keeps the checkpoint of it at once (``keep_imported``), and the first audit of an
imported conversation, in any process, starts from it instead of walking the whole log.
"""

from __future__ import annotations

import logging
import sqlite3
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from treadle.events.audit import AuditReport, IncrementalAudit
from treadle.events.audit_checkpoint import CheckpointError
from treadle.events.audit_facts import AuditFacts, facts_of
from treadle.events.model import ROOT, EventBase
from treadle.store.base import ConversationInfo, EventStore, StoreError

if TYPE_CHECKING:  # the SQLite store imports this module: psycopg only when it is used
    import psycopg

_log = logging.getLogger(__name__)

KEEP_EVERY = 5_000
"""Events an audit walks since it was restored (or kept) before it writes a newer checkpoint:
what the first audit of a fresh process walks after restoring is at most about this many
(~0.25 s), and a fork that made an audit walk the whole log again is kept at once."""


class StoredFacts:
    """The ``FactsSource`` of a restored audit: the records of a stored conversation's events,
    read from the store's columns by seq (``EventStore.audit_facts`` and ``audit_seqs``)."""

    def __init__(self, store: EventStore, conversation_id: str) -> None:
        # weakly: a server's audit cache is keyed by its store weakly, and what it holds must
        # not keep the store alive
        self._store = weakref.ref(store)
        self.conversation_id = conversation_id

    @property
    def store(self) -> EventStore:
        store = self._store()
        if store is None:
            raise StoreError("the store of this audit was closed and dropped; open it again")
        return store

    def facts(self, start: int, end: int) -> Sequence[AuditFacts]:
        return self.store.audit_facts(self.conversation_id, start, end)

    def positions(self, ids: Sequence[str], end: int) -> dict[str, int]:
        return self.store.audit_seqs(self.conversation_id, ids, end)


def restored_audit(store: EventStore, info: ConversationInfo) -> IncrementalAudit | None:
    """The audit of the store's checkpoint of the conversation ``info`` describes, or None
    without a usable one (none yet, one of an earlier conversation of that id, or one written
    in a format this Treadle does not read: the audit is then rebuilt)."""
    found = store.audit_checkpoint(info.id)
    if found is None:
        return None
    upto, created_at, data = found
    if created_at != info.created_at:
        return None
    try:
        audit = IncrementalAudit.restore(data, StoredFacts(store, info.id))
    except CheckpointError:
        return None
    return audit if len(audit) == upto else None


def audit_to(
    store: EventStore, info: ConversationInfo, audit: IncrementalAudit | None = None
) -> tuple[IncrementalAudit, ConversationInfo]:
    """``audit`` (none or empty: the store's checkpoint, else a new audit) extended to the
    conversation's events up to ``info.event_count``, and the info it covers (read again when
    the checkpoint is of a later count than ``info``: another process appended since)."""
    if audit is None or len(audit) == 0:
        audit = restored_audit(store, info)
        if audit is not None and len(audit) > info.event_count:
            info = store.get_conversation(info.id)
            audit = restored_audit(store, info)  # re-created meanwhile: not the old rows
            if audit is not None and len(audit) > info.event_count:
                audit = None
        audit = audit or IncrementalAudit()
    if len(audit) < info.event_count:  # the rows up to the count read: a fixed prefix
        audit.extend(store.audit_facts(info.id, len(audit), info.event_count))
    return audit, info


def keep(store: EventStore, conversation_id: str, audit: IncrementalAudit) -> None:
    """Write the audit's checkpoint when it walked ``KEEP_EVERY`` events since it was
    restored or last kept (appends walked from the checkpoint, or the whole log walked again
    after a fork from an older event)."""
    if audit.unkept < KEEP_EVERY:
        return
    try:
        data = audit.checkpoint()
        if data is None:  # a tree with faults: a store never holds one
            return
        store.keep_audit_checkpoint(conversation_id, len(audit), data)
    except (StoreError, ValueError, OverflowError) as error:
        # read-only, busy, gone, a row too large: an optimisation, the audit's answer (or the
        # import) is right without it
        _log.warning("audit checkpoint of %r not kept: %s", conversation_id, error)
        return
    audit.unkept = 0


def stored_log_facts(events: Sequence[EventBase]) -> list[AuditFacts]:
    """The records ``EventStore.audit_facts`` reads back of ``events`` stored as the whole log
    of a conversation (seq = position), without reading them: each event's own, with its
    parent as the append resolved it (TREE-PARENT, ``store.append_plan``): an event with no
    parent (legacy) names the event before it, or is a root (``"__root__"``, as
    ``store.audit_rows`` names a stored root) when first. An audit of them is the audit of
    the stored log, and its checkpoint the one the stored rows give."""
    facts: list[AuditFacts] = []
    previous = ROOT
    for event in events:
        record = facts_of(event)  # a new record of the event: ours to resolve
        if record.parent_id is None:
            record.parent_id = previous
        previous = record.id
        facts.append(record)
    return facts


def keep_imported(store: EventStore, conversation_id: str, events: Sequence[EventBase]) -> None:
    """Keep the audit checkpoint of a conversation whose whole log an import has just stored
    as ``events`` (one ``append_batch`` into a new conversation), audited from the events in
    memory, so that its first audit in any process restores it and walks nothing. As
    ``keep``: from ``KEEP_EVERY`` events on (a smaller log's first audit is cheap), and never
    raises: a failure is logged, the import stands."""
    if len(events) < KEEP_EVERY:  # what ``keep`` would not write: not worth the walk
        return
    keep(store, conversation_id, IncrementalAudit(stored_log_facts(events)))


def audit_stored(store: EventStore, conversation_id: str, head: str | None = None) -> AuditReport:
    """The audit of a stored conversation (every branch), focused on ``head`` (default: the
    stored head), from the store's checkpoint and the events after it; keeps a newer
    checkpoint when it walked enough. ``treadle audit`` on a stored conversation uses it."""
    audit, info = audit_to(store, store.get_conversation(conversation_id))
    keep(store, conversation_id, audit)
    return audit.report(head if head is not None else info.head_id)


# -- the schema step ---------------------------------------------------------------------------

SQLITE_TABLE = """CREATE TABLE IF NOT EXISTS audit_checkpoints (
    conversation INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    upto INTEGER NOT NULL,
    state BLOB NOT NULL
)"""
POSTGRES_TABLE = """CREATE TABLE IF NOT EXISTS audit_checkpoints (
    conversation bigint PRIMARY KEY REFERENCES conversations (key) ON DELETE CASCADE,
    created_at timestamptz NOT NULL,
    upto bigint NOT NULL,
    state bytea NOT NULL
)"""


def sqlite_add_audit_checkpoints(conn: sqlite3.Connection) -> None:
    """SQLite schema step: the empty table (each conversation's first audit fills its row)."""
    conn.execute(SQLITE_TABLE)


def postgres_add_audit_checkpoints(conn: psycopg.Connection[Any]) -> None:
    """PostgreSQL schema step: the empty table (each conversation's first audit fills its row)."""
    conn.execute(POSTGRES_TABLE)


__all__ = [
    "KEEP_EVERY",
    "StoredFacts",
    "audit_stored",
    "audit_to",
    "keep",
    "keep_imported",
    "postgres_add_audit_checkpoints",
    "restored_audit",
    "sqlite_add_audit_checkpoints",
    "stored_log_facts",
]
