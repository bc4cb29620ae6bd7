"""Conversation statuses (docs/contracts.md, RUN) and how they are recorded in the log.

A status change is a ``state_change`` event (key ``status``): a side leaf that never moves the
head, so the log itself says what state a conversation was left in, also after a crash.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Any

from treadle.events.model import StateChangeEvent, event_to_dict
from treadle.store.base import EventQuery, EventStore, StoredEvent

STATUS_KEY = "status"
HEAD_KEY = "head"
"""State-change key recording an explicit head move (switch branch), so streams see it."""


class ConversationStatus(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    WAITING_FOR_CONFIRMATION = "waiting_for_confirmation"
    PAUSED = "paused"
    FINISHED = "finished"
    ERROR = "error"
    STUCK = "stuck"


def status_event(
    status: ConversationStatus, parent_id: str, reason: str | None = None
) -> StateChangeEvent:
    value: dict[str, Any] = {"status": status.value}
    if reason:
        value["reason"] = reason
    return StateChangeEvent(key=STATUS_KEY, value=value, parent_id=parent_id)


def status_from_event(event: StateChangeEvent) -> tuple[ConversationStatus, str | None] | None:
    """The status (and reason) an event records, or None when it records something else."""
    if event.key != STATUS_KEY or not isinstance(event.value, dict):
        return None
    try:
        return ConversationStatus(event.value.get("status")), event.value.get("reason")
    except ValueError:
        return None


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


def stream_messages(stored: StoredEvent) -> Iterator[dict[str, Any]]:
    """The stream messages for one stored event: the event itself, then what it means."""
    event = stored.event
    yield {"type": "event", "seq": stored.seq, "event": event_to_dict(event)}
    if not isinstance(event, StateChangeEvent):
        return
    status = status_from_event(event)
    if status is not None:
        state, reason = status
        yield {"type": "status", "seq": stored.seq, "status": state.value, "reason": reason}
        if state is not ConversationStatus.RUNNING:
            yield {"type": "run_finished", "seq": stored.seq, "status": state.value}
    elif event.key == HEAD_KEY and isinstance(event.value, dict):
        yield {"type": "head", "seq": stored.seq, "head_id": event.value.get("head")}
