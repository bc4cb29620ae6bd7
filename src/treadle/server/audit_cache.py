"""The audits a server process keeps, one per conversation, extended from the last audited
seq so that ``GET /audit`` reads only the events appended since (``IncrementalAudit``), and
the answers it made, so that a read with nothing new appended costs one conversation lookup.

Kept in the process, and in the store as a checkpoint (``treadle.store.audit_summary``): a
conversation this process has not audited yet starts from the store's checkpoint and walks
only the events after it, and an audit that walked ``KEEP_EVERY`` events past the checkpoint
writes a newer one (never on every read: the walk's state is ~64 bytes an event). The key (conversation id, created_at,
last audited seq) names an immutable prefix of an append-only log with gap-free seqs (a
deleted and re-created conversation has another created_at), so several servers sharing one
PostgreSQL store each keep a correct cache with no invalidation between them: each catches up
by reading the rows after its own last seq. An answer is kept for (that key, focus head,
violations limit): a moved head or a new event makes another key.

An audit holds what the walk reads of each event (``AuditFacts``, read from the store's
columns without decoding payloads) and its int arrays: about 0.5 KB an event (a 1,000,000-
event conversation: ~500 MiB of RSS; bench/README.md). ``EVENTS_KEPT`` bounds the events held over all
conversations: the least recently read audits are dropped first (the one being read is kept
even when it alone is larger).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from treadle.events.audit import IncrementalAudit
from treadle.store.audit_summary import audit_to, keep
from treadle.store.base import EventStore

CONVERSATIONS_KEPT = 8
"""Audits kept per store at most (least recently read dropped)."""
EVENTS_KEPT = 2_000_000
"""Events held by the kept audits of one store, over all its conversations, at most."""
ANSWERS_KEPT = 16
"""Encoded answers kept per conversation for its current last seq (heads x limits asked)."""
VIOLATIONS_LIMIT = 1000
"""Violations listed in an answer unless asked otherwise (the totals are always exact)."""


@dataclass
class _Entry:
    created_at: object
    audit: IncrementalAudit = field(default_factory=IncrementalAudit)
    lock: threading.Lock = field(default_factory=threading.Lock)
    answers: dict[tuple[str | None, int], bytes] = field(default_factory=dict)
    """Encoded answers for the events audited now, by (focus head, violations limit)."""


class AuditCache:
    """Audits of one store's conversations, extended on read, with their encoded answers."""

    def __init__(self, kept: int = CONVERSATIONS_KEPT, events_kept: int = EVENTS_KEPT) -> None:
        self._kept = kept
        self._events_kept = events_kept
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def answer(
        self,
        store: EventStore,
        conversation_id: str,
        head: str | None,
        violations_limit: int = VIOLATIONS_LIMIT,
    ) -> bytes:
        """The ``GET /audit`` JSON (``AuditReport.to_summary_dict``) of the conversation's whole
        stored log (every branch), focused on ``head`` (default: the stored head)."""
        info = store.get_conversation(conversation_id)
        with self._lock:
            entry = self._entries.get(conversation_id)
            if entry is None or entry.created_at != info.created_at:
                entry = self._entries[conversation_id] = _Entry(info.created_at)
            self._entries.move_to_end(conversation_id)
        with entry.lock:
            if len(entry.audit) < info.event_count:  # the rows up to that count: a fixed prefix
                # A new entry starts from the store's checkpoint (store/audit_summary.py).
                entry.audit, info = audit_to(store, info, entry.audit)
                keep(store, conversation_id, entry.audit)
                entry.answers.clear()
            focus = head if head is not None else info.head_id
            key = (focus, violations_limit)
            answer = entry.answers.get(key)
            if answer is None:
                report = entry.audit.report(focus)
                answer = json.dumps(report.to_summary_dict(violations_limit)).encode()
                if len(entry.answers) >= ANSWERS_KEPT:
                    entry.answers.clear()
                entry.answers[key] = answer
        self._bound(keep=conversation_id)
        return answer

    def _bound(self, keep: str) -> None:
        """Drop the least recently read audits past the bounds (never ``keep``'s)."""
        with self._lock:
            held = sum(len(entry.audit) for entry in self._entries.values())
            for conversation_id in list(self._entries):
                if len(self._entries) <= self._kept and held <= self._events_kept:
                    break
                if conversation_id != keep:
                    held -= len(self._entries.pop(conversation_id).audit)

    def held(self) -> dict[str, int]:
        """Events held per kept conversation, least recently read first (for tests, bench)."""
        with self._lock:
            return {key: len(entry.audit) for key, entry in self._entries.items()}


_caches: weakref.WeakKeyDictionary[EventStore, AuditCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def audit_cache(store: EventStore) -> AuditCache:
    """The process's audit cache of ``store`` (made on first use, dropped with the store)."""
    with _caches_lock:
        cache = _caches.get(store)
        if cache is None:
            cache = _caches[store] = AuditCache()
        return cache


__all__ = [
    "CONVERSATIONS_KEPT",
    "EVENTS_KEPT",
    "VIOLATIONS_LIMIT",
    "AuditCache",
    "audit_cache",
]
