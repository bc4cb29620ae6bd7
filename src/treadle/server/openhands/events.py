"""Stored events as the SDK's own event JSON (through the OpenHands codec, so the SDK's
``Event.model_validate`` takes every one), pages of them, and the state updates the socket
sends that are not in the log.

Paging: ``page_id`` is the seq of the next event to send, as text (opaque to the client). The
timestamps are the stored ones (UTC, ISO 8601 with offset); the SDK's client orders its cache
by timestamp text, which for these is the log's order.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from treadle.events.model import utc_now_iso
from treadle.server.errors import ApiError
from treadle.store.base import EventQuery, EventStore, StoredEvent
from treadle.store.openhands.codec import UnwritableEvent, sdk_event_json
from treadle.store.openhands.kinds import BY_SDK_KIND, STATE_UPDATE_KIND

MAX_PAGE = 100
"""The OpenHands server's own largest page."""
PAGE_ID_MAX_CHARS = 20


def sdk_json(stored: StoredEvent) -> dict[str, Any]:
    """The SDK event for a stored one; an event the codec cannot write as the SDK's (a
    foreign kind with odd ``extra``) goes out as a plain state update naming its kind, so
    the client's list still has every event of the log, by id."""
    try:
        return sdk_event_json(stored.event)
    except UnwritableEvent:
        event = stored.event
        return {
            "id": event.id,
            "timestamp": event.timestamp,
            "source": "environment",
            "key": "treadle_event",
            "value": {"kind": event.kind},
            "kind": STATE_UPDATE_KIND,
        }


def state_update(key: str, value: Any) -> str:
    """A state update not stored in the log (a fresh id each time)."""
    return json.dumps(
        {
            "id": str(uuid.uuid4()),
            "timestamp": utc_now_iso(),
            "source": "environment",
            "key": key,
            "value": value,
            "kind": STATE_UPDATE_KIND,
        },
        ensure_ascii=False,
    )


def _page_start(page_id: str | None) -> int:
    if page_id is None or page_id == "":
        return 0
    if len(page_id) > PAGE_ID_MAX_CHARS or not page_id.isdigit():
        raise ApiError(
            422, "bad_page_id", "page_id must be a next_page_id this server gave (digits)"
        )
    return int(page_id)


def treadle_kind(sdk_kind: str) -> str | None:
    mapping = BY_SDK_KIND.get(sdk_kind)
    return None if mapping is None else mapping.treadle_kind


def search_page(
    store: EventStore,
    conversation_id: str,
    *,
    page_id: str | None,
    limit: int,
    kind: str | None = None,
    source: str | None = None,
    body: str | None = None,
    descending: bool = False,
) -> dict[str, Any]:
    """``{items, next_page_id}`` in the log's order (or reversed)."""
    start = _page_start(page_id)
    kinds: list[str] | None = None
    if kind is not None:
        mapped = treadle_kind(kind)
        if mapped is None:
            return {"items": [], "next_page_id": None}
        kinds = [mapped]
    query = EventQuery(
        kinds=kinds,
        sources=[source] if source else None,
        text=body or None,
        order="desc" if descending else "asc",
        limit=limit,
        after_seq=None if descending else start - 1,
        before_seq=(start or None) if descending else None,
    )
    page = store.search(conversation_id, query)
    items = [sdk_json(stored) for stored in page.items]
    following = None
    if page.next_cursor is not None:
        following = str(page.next_cursor + 1 if not descending else page.next_cursor)
    return {"items": items, "next_page_id": following}
