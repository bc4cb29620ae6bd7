"""One conversation's log as its writer sees it: the store, the head, the active path (cached,
extended by our own appends), appends chained onto the head, status records, and the callbacks
told of each event after it is stored. Every fact it writes is checked against the registry of
facts first (``events.facts.check_fact``): a wrong one is refused before anything is stored."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from treadle.events.facts import check_fact
from treadle.events.model import ROOT, Event, EventBase, StateChangeEvent
from treadle.runtime.status import ConversationStatus, head_move_event, read_status, status_event
from treadle.store.base import EventStore, StoredEvent

logger = logging.getLogger(__name__)

EventCallback = Callable[[StoredEvent], None]


class ConversationLog:
    """Writes to the stored conversation ``conversation_id`` (it must exist) and reads its
    active path: a step costs O(new events), not O(history)."""

    def __init__(
        self, store: EventStore, conversation_id: str, callbacks: Sequence[EventCallback] = ()
    ) -> None:
        self.store = store
        self.id = conversation_id
        self.callbacks = list(callbacks)
        self.lock = threading.RLock()
        """Held by each write; a caller holds it too to make several writes one step."""
        self._path: list[Event] = []
        self._path_head: str | None = None

    @property
    def head(self) -> str | None:
        return self.store.head(self.id)

    def last_seq(self) -> int:
        """The seq of the newest event (-1 when there is none)."""
        return self.store.event_count(self.id) - 1

    def path(self) -> list[Event]:
        """root..head (TREE-PATH): the cached path when the stored head is still its end,
        else a fresh read. The list is the cache's own: callers must not change it."""
        with self.lock:
            head = self.store.head(self.id)
            if head != self._path_head:
                self._path = self.store.path_to_root(self.id, head) if head else []
                self._path_head = head
            return self._path

    def read_status(self) -> tuple[ConversationStatus, str | None]:
        """The status the log records now (another process may have moved it on)."""
        return read_status(self.store, self.id)

    def append(self, events: Sequence[EventBase]) -> list[Event]:
        """Store ``events`` as one atomic batch, chained onto the head; then tell callbacks."""
        for event in events:
            _check(event)
        with self.lock:
            parent = self.head or ROOT
            chained: list[Event] = []
            for event in events:
                # A copy is of its original's class: one of the Event union's.
                chained.append(event.model_copy(update={"parent_id": parent}))  # type: ignore[arg-type]
                parent = event.id
            seqs = self.store.append_batch(self.id, chained)
            if self._path_head == (None if chained[0].parent_id == ROOT else chained[0].parent_id):
                self._path.extend(chained)
                self._path_head = chained[-1].id
        for seq, event in zip(seqs, chained, strict=True):
            self.notify(StoredEvent(seq=seq, event=event))
        return chained

    def append_side(self, event: Event) -> None:
        """Store a side leaf (a state change: never the head), then tell callbacks."""
        _check(event)
        with self.lock:
            seq = self.store.append(self.id, event, move_head=False)
        self.notify(StoredEvent(seq=seq, event=event))

    def record_fact(self, key: str, value: dict[str, Any]) -> None:
        """A state change beside the head (never model-visible, never moves the head);
        ``FactRefused`` when ``key`` and ``value`` are not a fact of the registry."""
        check_fact(key, value)
        with self.lock:
            event = StateChangeEvent(key=key, value=value, parent_id=self.head or ROOT)
            seq = self.store.append(self.id, event, move_head=False)
        self.notify(StoredEvent(seq=seq, event=event))

    def record_status(
        self,
        status: ConversationStatus,
        reason: str | None = None,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Record ``status``; ``then`` runs once it is stored, before any callback hears of it
        (the writer's own view of its status moves with the log's)."""
        with self.lock:
            event = status_event(status, self.head or ROOT, reason)
            _check(event)
            seq = self.store.append(self.id, event, move_head=False)
            if then is not None:
                then()
        self.notify(StoredEvent(seq=seq, event=event))

    def move_head(self, event_id: str) -> None:
        """Make ``event_id`` the head, recorded so that streams see the move."""
        event = head_move_event(event_id)
        _check(event)
        with self.lock:
            self.store.set_head(self.id, event_id)
            seq = self.store.append(self.id, event, move_head=False)
        self.notify(StoredEvent(seq=seq, event=event))

    def notify(self, stored: StoredEvent) -> None:
        for callback in self.callbacks:
            try:
                callback(stored)
            except Exception:  # a failing callback never stops the write (already stored)
                logger.exception("event callback %r failed on event %s", callback, stored.event.id)


def _check(event: EventBase) -> None:
    """A state change the runtime writes must be a registered fact (``FactRefused``)."""
    if isinstance(event, StateChangeEvent):
        check_fact(event.key, event.value)
