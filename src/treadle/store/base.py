"""The one ``EventStore`` interface every layer above the store uses, and its value types.

Backends (sqlite, postgres) implement it with the same semantics; tests/store runs one
contract suite against both.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from treadle.errors import TreadleError
from treadle.events.audit_facts import AuditFacts
from treadle.events.branches import BranchSummary
from treadle.events.model import Event


class StoreError(TreadleError):
    """The store cannot do what was asked (bad URL, corrupt file, wrong schema version...)."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or written now (connection lost, disk full, file removed
    or made read-only): not the caller's fault, worth retrying later (HTTP 503)."""


class ConversationNotFound(StoreError):
    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"conversation {conversation_id!r} does not exist in this store")


class ConversationExists(StoreError):
    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"conversation {conversation_id!r} already exists")


class EventNotFound(StoreError):
    def __init__(self, conversation_id: str, event_id: str) -> None:
        self.conversation_id = conversation_id
        self.event_id = event_id
        super().__init__(f"event {event_id!r} is not in conversation {conversation_id!r}")


class HeadMoved(StoreError):
    """An append said which head it continues (``expect_head``) and the conversation's head is
    another (another writer moved it): nothing was appended; read the head and chain again."""

    def __init__(self, conversation_id: str, expected: str | None, found: str | None) -> None:
        self.conversation_id = conversation_id
        self.expected = expected
        self.found = found
        super().__init__(
            f"the head of conversation {conversation_id!r} is {found!r}, not {expected!r} as "
            "the append expected (another writer moved it); nothing was appended: read the "
            "head again and append onto it"
        )


MAX_SEQ = 2**63 - 1
"""The largest seq a store can hold (a signed 64-bit integer): seq cursors are -1..MAX_SEQ."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event with the sequence number the store gave it (per conversation, from 0)."""

    seq: int
    event: Event
    payload: str | None = field(default=None, compare=False, repr=False)
    """The event's JSON as stored, when it was read from the store: the stream sends it as
    it is, with no re-encoding."""


@dataclass(frozen=True, slots=True)
class EventShape:
    """An event's place in the tree without its payload: enough for ``EventTree`` (heads,
    branch points, children) at a fraction of the cost of decoding every event."""

    seq: int
    id: str
    parent_id: str
    """The resolved parent's id, or ``"__root__"`` for a root (never absent)."""
    kind: str


def shapes_from_rows(rows: Sequence[tuple[int, str, int | None, str]]) -> list[EventShape]:
    """Shapes from (seq, id, parent_seq, kind) rows in seq order (parent_seq None/-1: a root)."""
    ids = [row[1] for row in rows]
    return [
        EventShape(seq, event_id, "__root__" if parent is None or parent < 0 else ids[parent], kind)
        for seq, event_id, parent, kind in rows
    ]


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    id: str
    title: str | None
    created_at: datetime
    updated_at: datetime
    head_id: str | None
    event_count: int
    metadata: dict[str, Any] = field(default_factory=dict)
    """The runtime's settings, the origin of an import, ... (JSON object)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    """Usage totals of every model call in the log, every branch (``treadle.events.usage``),
    kept by the append (``treadle.store.usage_totals``): cost is a float sum."""
    status: str | None = None
    """The status the log records last (a ``data.status.ConversationStatus`` value; None:
    none yet, IDLE), kept by the append (``treadle.store.status_columns``)."""
    status_reason: str | None = None
    """That status's reason."""


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Filters for ``search``/``count``; every given filter must hold (AND).

    Paging is by seq: ``after_seq``/``before_seq`` are exclusive cursors; ``order`` "asc" pages
    forward from ``after_seq``, "desc" pages backward from ``before_seq``.
    """

    kinds: Sequence[str] | None = None
    sources: Sequence[str] | None = None
    after_seq: int | None = None
    before_seq: int | None = None
    time_from: datetime | None = None
    """Inclusive lower bound on the event's timestamp (naive timestamps read as UTC)."""
    time_to: datetime | None = None
    """Exclusive upper bound on the event's timestamp."""
    branch_head: str | None = None
    """Only events on the active path of this head."""
    text: str | None = None
    """Case-insensitive substring of the event's JSON."""
    order: Literal["asc", "desc"] = "asc"
    limit: int = 100


@dataclass(frozen=True, slots=True)
class EventPage:
    items: list[StoredEvent]
    next_cursor: int | None
    """Pass as ``after_seq`` (asc) or ``before_seq`` (desc) for the next page; None at the end."""


@runtime_checkable
class EventStore(Protocol):
    """Durable append-only conversation logs (docs/contracts.md, APPEND and TREE)."""

    url: str

    # conversations
    def create_conversation(
        self,
        conversation_id: str | None = None,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationInfo: ...
    def get_conversation(self, conversation_id: str) -> ConversationInfo: ...
    def list_conversations(
        self, *, limit: int = 100, offset: int = 0
    ) -> list[ConversationInfo]: ...
    def update_conversation(
        self,
        conversation_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationInfo: ...
    def delete_conversation(self, conversation_id: str) -> None: ...

    # writing
    def append(self, conversation_id: str, event: Event, *, move_head: bool = True) -> int: ...
    def append_batch(
        self,
        conversation_id: str,
        events: Sequence[Event],
        *,
        move_head: bool = True,
        expect_head: str | None = None,
    ) -> list[int]:
        """Store ``events`` as one atomic batch; their seqs. ``expect_head``: the batch is
        refused with ``HeadMoved`` (nothing stored) unless the conversation's head is that
        event (``ROOT``: it has none); a writer that keeps the head it last wrote checks it
        this way instead of reading it before each append."""
        ...

    def set_head(self, conversation_id: str, event_id: str | None) -> None: ...

    # reading
    def head(self, conversation_id: str) -> str | None: ...
    def event_count(self, conversation_id: str) -> int:
        """How many events the conversation holds (its next seq): one small row read, for
        the callers that poll (a run's watcher), where ``get_conversation`` would decode the
        settings each time."""
        ...

    def event_counts(self, conversation_ids: Sequence[str]) -> dict[str, int]:
        """``event_count`` of each of many conversations in one read (the watcher polling a
        process's runs together); a conversation that does not exist is left out."""
        ...

    def get_event(self, conversation_id: str, event_id: str) -> StoredEvent: ...
    def get_range(
        self, conversation_id: str, start_seq: int, end_seq: int
    ) -> list[StoredEvent]: ...
    def path_to_root(
        self, conversation_id: str, head_id: str | None = None, limit: int | None = None
    ) -> list[Event]: ...
    def shapes(self, conversation_id: str) -> list[EventShape]:
        """Every event's (seq, id, parent id, kind) in seq order, without payloads."""
        ...

    def audit_facts(self, conversation_id: str, start_seq: int, end_seq: int) -> list[AuditFacts]:
        """What the audit reads of the events with ``start_seq <= seq < end_seq`` (seq order),
        from columns and a few payload fields: no event is decoded."""
        ...

    def audit_seqs(self, conversation_id: str, ids: Sequence[str], end_seq: int) -> dict[str, int]:
        """The seqs below ``end_seq`` of those ``ids`` that are events of the conversation
        (index look-ups: what a restored audit asks of the events before its checkpoint)."""
        ...

    def audit_checkpoint(self, conversation_id: str) -> tuple[int, datetime, bytes] | None:
        """The conversation's kept audit checkpoint (``treadle.store.audit_summary``): the
        seq it covers up to, the ``created_at`` of the conversation it was made for, its
        bytes; None when no audit kept one yet."""
        ...

    def keep_audit_checkpoint(self, conversation_id: str, upto: int, state: bytes) -> None:
        """Keep ``state``, the checkpoint of the audit of the events with ``seq < upto``,
        unless the store holds one of a later ``upto`` already (never the append's work)."""
        ...

    def children(self, conversation_id: str, event_id: str) -> list[StoredEvent]:
        """The events whose resolved parent is ``event_id``, in seq order (an index lookup)."""
        ...

    def branch_summary(self, conversation_id: str) -> BranchSummary:
        """Heads, lines and branch points (``treadle.events.branches``) from the store's line
        index, kept at append time: O(branches), no scan of the log."""
        ...

    def search(self, conversation_id: str, query: EventQuery) -> EventPage: ...
    def count(self, conversation_id: str, query: EventQuery) -> int: ...
    def subscribe(
        self,
        conversation_id: str,
        after_seq: int = -1,
        *,
        poll_interval: float = 0.05,
        stop: threading.Event | None = None,
    ) -> Generator[StoredEvent, None, None]:
        """Stored events after ``after_seq``, then new ones as they are appended. Ends (and
        frees its connection) when closed, or within ``poll_interval`` of ``stop`` being set
        from any thread, even while it waits for an event."""
        ...

    def close(self) -> None: ...
