"""Conversation statuses (docs/contracts.md, RUN) as the API names them, how a ``state_change`` event
records a status or a head move (the stream's frames: ``treadle.api.stream``). The runtime
writes these events (``treadle.runtime.status``); server and client read them the same way."""

from __future__ import annotations

from enum import StrEnum

from treadle.events.model import StateChangeEvent

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
