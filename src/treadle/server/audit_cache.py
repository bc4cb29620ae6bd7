"""The audits a server process keeps, one per conversation, extended from the last audited
seq so that ``GET /audit`` reads only the events appended since (``IncrementalAudit``).

Kept in the process, not in a store table: the state that extends an audit is the walk over
the whole log, too big to write back on every read. The key (conversation id, created_at,
last audited seq) names an immutable prefix of an append-only log with gap-free seqs (a
deleted and re-created conversation has another created_at), so several servers sharing one
PostgreSQL store each keep a correct cache with no invalidation between them: each catches up
by reading the rows after its own last seq.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from treadle.events.audit import AuditReport, IncrementalAudit
from treadle.store.base import EventStore

CONVERSATIONS_KEPT = 8
"""Audits kept per store (least recently used dropped): each holds its log's events."""


@dataclass
class _Entry:
    created_at: object
    audit: IncrementalAudit = field(default_factory=IncrementalAudit)
    lock: threading.Lock = field(default_factory=threading.Lock)


class AuditCache:
    """Audits of one store's conversations, extended on read."""

    def __init__(self, kept: int = CONVERSATIONS_KEPT) -> None:
        self._kept = kept
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def report(self, store: EventStore, conversation_id: str, head: str | None) -> AuditReport:
        """The audit of the conversation's whole stored log (every branch), focused on ``head``
        (default: the stored head)."""
        info = store.get_conversation(conversation_id)
        with self._lock:
            entry = self._entries.get(conversation_id)
            if entry is None or entry.created_at != info.created_at:
                entry = self._entries[conversation_id] = _Entry(info.created_at)
            self._entries.move_to_end(conversation_id)
            while len(self._entries) > self._kept:
                self._entries.popitem(last=False)
        with entry.lock:
            audited = len(entry.audit)
            if audited < info.event_count:  # rows up to the count read above: a fixed prefix
                rows = store.get_range(conversation_id, audited, info.event_count)
                entry.audit.extend([row.event for row in rows])
            return entry.audit.report(head if head is not None else info.head_id)


_caches: weakref.WeakKeyDictionary[EventStore, AuditCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def audit_cache(store: EventStore) -> AuditCache:
    """The process's audit cache of ``store`` (made on first use, dropped with the store)."""
    with _caches_lock:
        cache = _caches.get(store)
        if cache is None:
            cache = _caches[store] = AuditCache()
        return cache


__all__ = ["CONVERSATIONS_KEPT", "AuditCache", "audit_cache"]
