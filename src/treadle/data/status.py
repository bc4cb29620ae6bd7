"""Conversation statuses (docs/contracts.md, RUN) as the API names them, how a ``state_change`` event
records a status or a head move (the stream's frames: ``treadle.api.stream``). The runtime
writes these events (``treadle.runtime.status``); server and client read them the same way."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from treadle.events.fact_keys import HEAD_KEY as HEAD_KEY
from treadle.events.fact_keys import STATUS_KEY as STATUS_KEY

if TYPE_CHECKING:  # a plain enum at run time: the command line offers it without the events
    from treadle.events.model import StateChangeEvent


class ConversationStatus(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    WAITING_FOR_CONFIRMATION = "waiting_for_confirmation"
    PAUSED = "paused"
    FINISHED = "finished"
    ERROR = "error"
    STUCK = "stuck"


class Control(StrEnum):
    """What a client may ask of a conversation by a button or a command, besides sending a
    message (always allowed: while a run holds it the message waits for the calls in flight)."""

    RUN = "run"
    PAUSE = "pause"
    INTERRUPT = "interrupt"
    CONFIRM = "confirm"


CONTROLS: dict[ConversationStatus, tuple[Control, ...]] = {
    ConversationStatus.IDLE: (Control.RUN,),
    ConversationStatus.RUNNING: (Control.PAUSE, Control.INTERRUPT),
    ConversationStatus.WAITING_FOR_CONFIRMATION: (Control.CONFIRM, Control.PAUSE),
    ConversationStatus.PAUSED: (Control.RUN,),
    # A finished run has answered: running it again would ask the model with nothing new
    # (a scripted model runs out, a real one is a paid call). A new message starts the next.
    ConversationStatus.FINISHED: (),
    ConversationStatus.ERROR: (Control.RUN,),
    ConversationStatus.STUCK: (Control.RUN,),
}
"""The controls each status offers (docs/contracts.md, RUN): the Canvas shows these and only
these; the server answers any other with 409 and what to do instead."""


def controls_of(status: ConversationStatus | str, *, interrupted: bool = False) -> list[str]:
    """The controls of ``status``; ``interrupted``: a RUNNING log whose run's process died
    (nobody holds its lease), which only a new run continues."""
    if interrupted:
        return [Control.RUN.value]
    return [control.value for control in CONTROLS[ConversationStatus(status)]]


def status_from_event(event: StateChangeEvent) -> tuple[ConversationStatus, str | None] | None:
    """The status (and reason) an event records, or None when it records something else."""
    if event.key != STATUS_KEY or not isinstance(event.value, dict):
        return None
    status, reason = event.value.get("status"), event.value.get("reason")
    if not isinstance(status, str) or status not in STATUS_VALUES:
        return None
    return ConversationStatus(status), reason if isinstance(reason, str) else None


STATUS_VALUES = frozenset(status.value for status in ConversationStatus)
"""Every status's value (what a stored status may be)."""
