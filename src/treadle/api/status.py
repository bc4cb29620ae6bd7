"""Conversation statuses (docs/contracts.md, RUN) as the API names them, how a ``state_change`` event
records a status or a head move, and the stream messages one stored event makes. The runtime
writes these events (``treadle.runtime.status``); server and client read them the same way."""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Any, Protocol

from treadle.events.model import EventBase, StateChangeEvent, event_to_dict

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


def status_from_event(event: StateChangeEvent) -> tuple[ConversationStatus, str | None] | None:
    """The status (and reason) an event records, or None when it records something else."""
    if event.key != STATUS_KEY or not isinstance(event.value, dict):
        return None
    status, reason = event.value.get("status"), event.value.get("reason")
    if not isinstance(status, str) or status not in _STATUS_VALUES:
        return None
    return ConversationStatus(status), reason if isinstance(reason, str) else None


_STATUS_VALUES = frozenset(status.value for status in ConversationStatus)


class SeqEvent(Protocol):
    """An event with its seq: the store's ``StoredEvent``, the client's ``EventItem``."""

    @property
    def seq(self) -> int: ...

    @property
    def event(self) -> EventBase: ...


def stream_messages(stored: SeqEvent) -> Iterator[dict[str, Any]]:
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
