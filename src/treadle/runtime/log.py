"""One conversation's log as its writer sees it: the store, the head, the active path (cached,
extended by our own appends), appends chained onto the head, status records, and the callbacks
told of each event after it is stored. Every fact it writes is checked against the registry of
facts first (``events.facts.check_fact``): a wrong one is refused before anything is stored.

While its writer works (``keeping_head``: a run, a confirmation) the log keeps the head it
read or wrote last instead of reading it again for each append, fact and path (a step read it
~15 times: a round trip each on PostgreSQL). Each append still names the head it continues
(``expect_head``): when another writer moved it, the store refuses the append, and the log
reads the head again and chains onto it, as an append right after a read of it always did.

A fact recorded ``ride_along`` while the head is kept (a batch's snapshot, a run's isolation)
waits for the writer's next write and is stored in its transaction, before its events (the
same seqs and tree as two appends, one commit fewer), at the latest when the writer stops
working. A crash in between loses only that fact: a log may lack it (a snapshot that failed
is not recorded either); nothing that a run's recovery or a replay reads rides along.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from treadle.events.fact_keys import PAUSE_REQUEST_KEY, QUEUED_MESSAGE_KEY
from treadle.events.facts import check_fact
from treadle.events.model import ROOT, Event, EventBase, StateChangeEvent
from treadle.runtime.status import ConversationStatus, head_move_event, read_status, status_event
from treadle.store.base import EventStore, HeadMoved, StoredEvent
from treadle.store.payloads import stored_payload

logger = logging.getLogger(__name__)

REQUEST_KEYS = (PAUSE_REQUEST_KEY, QUEUED_MESSAGE_KEY)
"""Facts that ask something of a run (``runtime.requests``): never counted as ``written_here``."""
HEAD_MOVED_RETRIES = 3
"""Appends tried again onto a head read afresh after another writer moved it, before the
HeadMoved is raised (each try means that writer moved it again meanwhile)."""

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
        self._keeping = 0
        """How many ``keeping_head`` scopes are open (a run in a confirmation...)."""
        self._kept: tuple[str | None] | None = None
        """The head while kept: (head,) once read or written, None when unknown."""
        self._own: tuple[int, int] | None = None
        """The latest run of consecutive seqs this log wrote (first, last): a reader of
        requests need not search what only this log wrote (``written_here``)."""
        self._riding: list[StateChangeEvent] = []
        """Facts recorded ``ride_along``, stored with this writer's next write."""

    @property
    def head(self) -> str | None:
        kept = self._kept
        if kept is not None:
            return kept[0]
        if not self._keeping:
            return self.store.head(self.id)
        with self.lock:  # read and kept as one: an append of another thread comes before or after
            if self._kept is None:
                self._kept = (self.store.head(self.id),)
            return self._kept[0]

    @contextmanager
    def keeping_head(self) -> Iterator[None]:
        """Keep the head between reads while this writer works (see the module's doc); on
        leaving, the next read asks the store again (another process may write between
        runs)."""
        with self.lock:
            self._keeping += 1
        try:
            yield
        finally:
            stored: list[StoredEvent] = []
            with self.lock:
                self._keeping -= 1
                if not self._keeping:
                    self._kept = None
                    if self._riding:
                        stored = self._store_riding()
            self._tell(stored)

    def _store_riding(self) -> list[StoredEvent]:
        """The facts still riding, stored on their own (the writer stops working): a failure
        is logged, those facts are not recorded (as a snapshot that failed is not)."""
        try:
            return self._side_batch([])
        except Exception:
            logger.warning(
                "facts %s of conversation %s not stored",
                [event.key for event in self._riding],
                self.id,
                exc_info=True,
            )
            self._riding = []
            return []

    def _keep(self, head: str | None) -> None:
        if self._keeping:
            self._kept = (head,)

    def _wrote(self, first: int, last: int) -> None:
        own = self._own
        self._own = (own[0], last) if own is not None and first == own[1] + 1 else (first, last)

    def written_here(self, after_seq: int, top: int) -> bool:
        """Whether every event with ``after_seq < seq <= top`` was written by this log (so
        none is another writer's request to read)."""
        own = self._own
        return top <= after_seq or (own is not None and own[0] <= after_seq + 1 and top <= own[1])

    def last_seq(self) -> int:
        """The seq of the newest event (-1 when there is none)."""
        return self.store.event_count(self.id) - 1

    def path(self) -> list[Event]:
        """root..head (TREE-PATH): the cached path when the stored head is still its end,
        else a fresh read. The list is the cache's own: callers must not change it."""
        with self.lock:
            head = self.head
            if head != self._path_head:
                self._path = self.store.path_to_root(self.id, head) if head else []
                self._path_head = head
            return self._path

    def read_status(self) -> tuple[ConversationStatus, str | None]:
        """The status the log records now (another process may have moved it on)."""
        return read_status(self.store, self.id)

    def append(self, events: Sequence[EventBase]) -> list[Event]:
        """Store ``events`` as one atomic batch, chained onto the head (after the facts riding
        along); then tell callbacks."""
        for event in events:
            _check(event)
        with self.lock:
            riding = self._riding
            for tries_left in range(HEAD_MOVED_RETRIES, -1, -1):
                head = self.head or ROOT
                chained = _chained(events, head)
                batch: list[Event] = [*riding, *chained]
                try:
                    seqs = self.store.append_batch(self.id, batch, expect_head=head)
                    break
                except HeadMoved:
                    self._kept = None  # read it again: another writer moved it
                    if not tries_left:
                        raise
            self._riding = []
            self._keep(chained[-1].id)
            self._wrote(seqs[0], seqs[-1])
            if self._path_head == (None if head == ROOT else head):
                self._path.extend(chained)
                self._path_head = chained[-1].id
        self._tell([StoredEvent(seq=seq, event=e) for seq, e in zip(seqs, batch, strict=True)])
        return chained

    def append_side(self, event: Event) -> None:
        """Store a side leaf (a state change: never the head), then tell callbacks. Not
        ``written_here``: a request (a queued message, a pause) is for the run's reader to
        find, whoever wrote it."""
        _check(event)
        with self.lock:
            seq = self.store.append(self.id, event, move_head=False)
        self.notify(StoredEvent(seq=seq, event=event))

    def record_fact(self, key: str, value: dict[str, Any], *, ride_along: bool = False) -> None:
        """A state change beside the head (never model-visible, never moves the head);
        ``FactRefused`` when ``key`` and ``value`` are not a fact of the registry.
        ``ride_along``: while the head is kept, stored with the writer's next write (see the
        module's doc); else now."""
        check_fact(key, value)
        with self.lock:
            event = StateChangeEvent(key=key, value=value, parent_id=self.head or ROOT)
            if ride_along and self._keeping and key not in REQUEST_KEYS:
                stored_payload(event)  # refused now (JsonLimitError), not with the next write
                self._riding.append(event)
                return
            # a request is to be read, whoever wrote it: not written_here
            stored = self._side_batch([event], own=key not in REQUEST_KEYS)
        self._tell(stored)

    def _side_batch(self, events: Sequence[Event], *, own: bool = True) -> list[StoredEvent]:
        """The facts riding along, then ``events``, stored as one batch that leaves the head
        where it is (the caller holds the lock). ``own``: ``events`` count as written here
        (the riding facts always do)."""
        batch = [*self._riding, *events]
        if not batch:
            return []
        seqs = self.store.append_batch(self.id, batch, move_head=False)
        counted = len(batch) if own else len(self._riding)
        self._riding = []
        if counted:
            self._wrote(seqs[0], seqs[counted - 1])
        return [StoredEvent(seq=seq, event=event) for seq, event in zip(seqs, batch, strict=True)]

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
            stored = self._side_batch([event])
            if then is not None:
                then()
        self._tell(stored)

    def move_head(self, event_id: str) -> None:
        """Make ``event_id`` the head, recorded so that streams see the move."""
        event = head_move_event(event_id)
        _check(event)
        with self.lock:
            self._kept = None  # unknown should the set fail half way
            self.store.set_head(self.id, event_id)
            self._keep(event_id)
            stored = self._side_batch([event])
        self._tell(stored)

    def _tell(self, stored: Sequence[StoredEvent]) -> None:
        for each in stored:
            self.notify(each)

    def notify(self, stored: StoredEvent) -> None:
        for callback in self.callbacks:
            try:
                callback(stored)
            except Exception:  # a failing callback never stops the write (already stored)
                logger.exception("event callback %r failed on event %s", callback, stored.event.id)


def _chained(events: Sequence[EventBase], head: str) -> list[Event]:
    """Copies of ``events`` each the child of the one before, the first of ``head``."""
    chained: list[Event] = []
    parent = head
    for event in events:
        # A copy is of its original's class: one of the Event union's.
        chained.append(event.model_copy(update={"parent_id": parent}))  # type: ignore[arg-type]
        parent = event.id
    return chained


def _check(event: EventBase) -> None:
    """A state change the runtime writes must be a registered fact (``FactRefused``)."""
    if isinstance(event, StateChangeEvent):
        check_fact(event.key, event.value)
