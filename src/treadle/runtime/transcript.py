"""A stored conversation's transcript, page by page (``Conversation.transcript``, the server's
``GET .../transcript``): the newest items of a path below a seq cursor, typed
(``api.transcript``), by the rules of ``events.view.transcript``, the status telling calls with
no result yet as waiting or running."""

from __future__ import annotations

from dataclasses import replace

from treadle.data.transcript import TRANSCRIPT_ADAPTER, TranscriptPage
from treadle.events.tree import resolved_parent_id
from treadle.events.view import Beside, transcript
from treadle.runtime.status import read_status
from treadle.store.base import EventQuery, EventStore

TRANSCRIPT_PAGE = 200
EVENTS_PER_ITEM = 10
"""Path events read per item asked for (a response holds its calls and their results)."""
MAX_TRANSCRIPT_READ = 10_000


def transcript_page(
    store: EventStore,
    conversation_id: str,
    head: str | None = None,
    before_seq: int | None = None,
    limit: int = TRANSCRIPT_PAGE,
) -> TranscriptPage:
    """The newest ``limit`` items of the path root..``head`` (default: the stored head) whose
    first event's seq is below ``before_seq``; for older ones pass ``next_before_seq``. Reads
    a bounded window of the path, not the whole path. Raises the store's EventNotFound for an
    unknown head."""
    head_id = head or store.head(conversation_id)
    if head_id is None:
        return TranscriptPage(head=None, items=[], next_before_seq=None)
    store.get_event(conversation_id, head_id)  # names an unknown head
    window = min(limit * EVENTS_PER_ITEM + 100, MAX_TRANSCRIPT_READ)
    query = EventQuery(branch_head=head_id, before_seq=before_seq, order="desc", limit=window)
    page = store.search(conversation_id, query)
    path = page.items[::-1]
    if not path:
        return TranscriptPage(head=head_id, items=[], next_before_seq=None)
    side = _side_events(store, conversation_id, path[0].seq, before_seq)
    status, _reason = read_status(store, conversation_id)
    items = transcript([s.event for s in path], side, [s.seq for s in path], status.value)
    older = page.next_cursor is not None
    if older and len(items) > 1:
        items = items[1:]  # its first calls may lie before the window: it comes with older ones
    if len(items) > limit:
        items, older = items[-limit:], True
    first_seq = items[0]["seq"] if items else None
    return TranscriptPage(
        head=head_id,
        items=TRANSCRIPT_ADAPTER.validate_python(items),
        next_before_seq=first_seq if older else None,
    )


def _side_events(
    store: EventStore, conversation_id: str, from_seq: int, before_seq: int | None
) -> list[Beside]:
    """The state changes (side leaves, off every path) from ``from_seq`` on, below
    ``before_seq``, with resolved parents."""
    side: list[Beside] = []
    query = EventQuery(
        kinds=["state_change"], after_seq=from_seq - 1, before_seq=before_seq, limit=1000
    )
    while True:
        page = store.search(conversation_id, query)
        for stored in page.items:
            previous = None
            if stored.event.parent_id is None and stored.seq > 0:  # legacy: the one before
                previous = store.get_range(conversation_id, stored.seq - 1, stored.seq)
            previous_id = previous[0].event.id if previous else None
            parent_id = resolved_parent_id(stored.event, previous_id)
            side.append(Beside(stored.event, parent_id, stored.seq))
        if page.next_cursor is None:
            return side
        query = replace(query, after_seq=page.next_cursor)
