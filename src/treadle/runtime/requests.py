"""Requests to a conversation's run recorded in its log (a pause, a user message sent while calls
run), so that whichever process holds the run honours them at its next safe point, whatever
process or server received them. Both are ``state_change`` side leaves: never model-visible,
never a head.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

from treadle.data.status import ConversationStatus, status_from_event
from treadle.events.fact_keys import PAUSE_REQUEST_KEY as PAUSE_REQUEST_KEY
from treadle.events.fact_keys import QUEUED_MESSAGE_KEY as QUEUED_MESSAGE_KEY
from treadle.events.model import MessageEvent, StateChangeEvent
from treadle.store.base import EventNotFound, EventQuery, EventStore

PauseKind = Literal["pause", "interrupt"]
USER_PAUSE = "paused by the user"
"""The reason recorded for a pause the user asked for (the default)."""
USER_INTERRUPT = (
    "interrupted by the user: the calls in progress were stopped; run again to continue"
)
"""The reason recorded for the pause that ends a run the user interrupted."""


def pause_request_event(parent_id: str, kind: PauseKind = "pause") -> StateChangeEvent:
    return StateChangeEvent(key=PAUSE_REQUEST_KEY, value={"kind": kind}, parent_id=parent_id)


def queued_message_event(parent_id: str, message: MessageEvent) -> StateChangeEvent:
    return StateChangeEvent(
        key=QUEUED_MESSAGE_KEY,
        value={"event_id": message.id, "text": message.text},
        parent_id=parent_id,
    )


def last_seq(store: EventStore, conversation_id: str) -> int:
    """The seq of the conversation's newest event (-1 when it has none)."""
    return store.event_count(conversation_id) - 1


def run_began(store: EventStore, conversation_id: str) -> int:
    """The seq of the RUNNING status that began the run the log says is in progress (the
    first RUNNING after the last other status), -1 when the log records none: a process that
    runs on a run whose process died watches pause requests from there, as that run did."""
    began, before = -1, None
    while True:
        query = EventQuery(
            kinds=["state_change"],
            text='"key":"status"',
            order="desc",
            limit=200,
            before_seq=before,
        )
        page = store.search(conversation_id, query)
        for stored in page.items:
            event = stored.event
            found = status_from_event(event) if isinstance(event, StateChangeEvent) else None
            if found is None:
                continue
            if found[0] is not ConversationStatus.RUNNING:
                return began
            began = stored.seq
        if page.next_cursor is None:
            return began
        before = page.next_cursor


def _records(
    store: EventStore, conversation_id: str, key: str, after_seq: int
) -> list[tuple[int, StateChangeEvent]]:
    found: list[tuple[int, StateChangeEvent]] = []
    cursor: int | None = after_seq
    while cursor is not None:
        page = store.search(
            conversation_id,
            EventQuery(kinds=["state_change"], text=f'"key":"{key}"', after_seq=cursor, limit=200),
        )
        for stored in page.items:
            event = stored.event
            if isinstance(event, StateChangeEvent) and event.key == key:
                found.append((stored.seq, event))
        cursor = page.next_cursor
    return found


def requested_since(store: EventStore, conversation_id: str, after_seq: int) -> PauseKind | None:
    """ "interrupt" when an interrupt was recorded after ``after_seq``, else "pause" when a
    pause was, else None."""
    kinds = {
        record.value.get("kind") if isinstance(record.value, dict) else None
        for _seq, record in _records(store, conversation_id, PAUSE_REQUEST_KEY, after_seq)
    }
    if "interrupt" in kinds:
        return "interrupt"
    return "pause" if kinds else None


WrittenHere = Callable[[int, int], bool]
"""``ConversationLog.written_here``: whether every event in (after, top] is the reader's own
writer's (then none is a request to read)."""


def _nobody_else(after_seq: int, top: int) -> bool:
    return top <= after_seq


def undelivered_messages(
    store: EventStore,
    conversation_id: str,
    after_seq: int,
    written_here: WrittenHere = _nobody_else,
    top: int | None = None,
) -> tuple[list[MessageEvent], int]:
    """The messages queued after ``after_seq`` and not stored yet, in the order they were sent,
    and the seq to continue from next time (a high-water mark: the log's end as this read
    began, so that the next read looks only at what came since, queued messages or not).
    ``top``: the log's last seq, if the caller just read it."""
    messages: list[MessageEvent] = []
    if top is None:
        top = last_seq(store, conversation_id)
    seen = max(after_seq, top)  # committed: the search sees it
    if written_here(after_seq, seen):
        return messages, seen  # nothing appended since but our own: nothing to search
    for seq, record in _records(store, conversation_id, QUEUED_MESSAGE_KEY, after_seq):
        seen = max(seen, seq)
        value = record.value if isinstance(record.value, dict) else {}
        event_id, text = value.get("event_id"), value.get("text")
        if not isinstance(event_id, str) or not isinstance(text, str):
            continue  # not one we wrote: nothing to deliver
        try:
            store.get_event(conversation_id, event_id)
        except EventNotFound:
            messages.append(MessageEvent(id=event_id, source="user", text=text))
    return messages, seen


class PauseRequest:
    """Whether a run must pause, and whether it was interrupted: asked in this process (a
    flag) or by any process, through a pause request recorded in the log after the seq the run
    watches from.

    The log is read at the run's safe points (``check``, once per step) and by the interrupt
    watcher (``interrupt_requested``, every ``WATCH_INTERVAL_S``), each time only from where
    the last read ended; ``is_set`` between them (before each call of a batch) reads nothing."""

    def __init__(
        self,
        store: EventStore,
        conversation_id: str,
        since: int,
        written_here: WrittenHere = _nobody_else,
    ) -> None:
        """``written_here``: the run's log's, so that what only it wrote is not searched."""
        self._store = store
        self._conversation_id = conversation_id
        self._written_here = written_here
        self._local = threading.Event()
        self._local_interrupt = threading.Event()
        self._reason: str | None = None
        """Why this process asked for the pause (None: a request in the log, the user's)."""
        self._reading = threading.Lock()
        """The run's thread and the interrupt watcher both read the log."""
        self._since = since
        self._seen = since
        """The seq up to which the log was read for requests (a high-water mark)."""
        self._logged: PauseKind | None = None
        """The strongest request read in the log after ``_since``."""

    def watch_from(self, seq: int) -> None:
        """Honour the requests recorded after ``seq`` (older ones were meant for older runs)."""
        with self._reading:
            self._since = self._seen = seq
            self._logged = None

    def set(self, reason: str = USER_PAUSE, kind: PauseKind = "pause") -> None:
        self._reason = reason
        if kind == "interrupt":
            self._local_interrupt.set()
        self._local.set()

    def clear(self) -> str:
        """Honoured: forget the flag and every request recorded so far; returns the reason."""
        if self._local.is_set() and self._reason:
            reason = self._reason
        elif self.interrupt_requested():
            reason = USER_INTERRUPT
        else:
            reason = USER_PAUSE
        self._local.clear()
        self._local_interrupt.clear()
        self._reason = None
        self.watch_from(last_seq(self._store, self._conversation_id))
        return reason

    def read_log(self, top: int | None = None) -> PauseKind | None:
        """Read the requests recorded since the last read, up to ``top`` (the log's last seq,
        read here when not given); the strongest one since the run began watching
        ("interrupt" over "pause"), or None."""
        with self._reading:
            # Everything up to ``top`` is committed now: the next read starts after it.
            if top is None:
                top = last_seq(self._store, self._conversation_id)
            # A search only when another writer added to the log (the watcher asks often).
            if not self._written_here(self._seen, top):
                kind = requested_since(self._store, self._conversation_id, self._seen)
                if kind == "interrupt" or (kind == "pause" and self._logged is None):
                    self._logged = kind
            self._seen = max(self._seen, top)
            return self._logged

    def check(self, top: int | None = None) -> bool:
        """At a safe point: whether the run must pause, the log read first (up to ``top``)."""
        self.read_log(top)
        return self.is_set()

    def is_set(self) -> bool:
        """Whether the run must pause, as far as this process knows (no read of the log)."""
        return self._local.is_set() or self._logged is not None

    def forget_interrupt(self) -> None:
        """A new run starts: an interrupt this process noticed for the last one (the run
        ended as it came) is not meant for it. A pause asked here still is."""
        if self._local_interrupt.is_set():
            self._local_interrupt.clear()
            if self._reason == USER_INTERRUPT:
                self._local.clear()
                self._reason = None

    def reason(self) -> str | None:
        """Why this process asked for the pause (None: the log's request, the user's)."""
        return self._reason

    def by_user(self) -> bool:
        """Whether the pause is the user's (asked through the API, the CLI or the log), not
        this process's own stop (it lost its lease, its server stops)."""
        return not self._local.is_set() or self._reason in (USER_PAUSE, USER_INTERRUPT)

    def interrupt_requested(self, top: int | None = None) -> bool:
        """Whether an interrupt (not a mere pause) was asked, here or in the log (read up to
        ``top``, the log's last seq, if given)."""
        return self._local_interrupt.is_set() or self.read_log(top) == "interrupt"
