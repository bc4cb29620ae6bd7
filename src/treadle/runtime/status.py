"""Conversation statuses (docs/contracts.md, RUN) and how they are recorded in the log.

A status change is a ``state_change`` event (key ``status``): a side leaf that never moves the
head, so the log itself says what state a conversation was left in, also after a crash.
"""

from __future__ import annotations

from typing import Any

# What a status event means lives in the API (server and client read it): re-exported here.
from treadle.api.status import HEAD_KEY as HEAD_KEY
from treadle.api.status import STATUS_KEY as STATUS_KEY
from treadle.api.status import ConversationStatus as ConversationStatus
from treadle.api.status import status_from_event as status_from_event
from treadle.api.status import stream_messages as stream_messages
from treadle.events.model import StateChangeEvent
from treadle.store.base import EventQuery, EventStore


def status_event(
    status: ConversationStatus, parent_id: str, reason: str | None = None
) -> StateChangeEvent:
    value: dict[str, Any] = {"status": status.value}
    if reason:
        value["reason"] = reason
    return StateChangeEvent(key=STATUS_KEY, value=value, parent_id=parent_id)


def head_move_event(head_id: str) -> StateChangeEvent:
    return StateChangeEvent(key=HEAD_KEY, value={"head": head_id}, parent_id=head_id)


def read_status(store: EventStore, conversation_id: str) -> tuple[ConversationStatus, str | None]:
    """The status (and reason) the conversation's log records last; IDLE when none."""
    query = EventQuery(kinds=["state_change"], text='"key":"status"', order="desc", limit=20)
    for stored in store.search(conversation_id, query).items:
        event = stored.event
        if isinstance(event, StateChangeEvent) and (found := status_from_event(event)):
            return found
    return ConversationStatus.IDLE, None
