"""The event stream's frames (docs/stream.md): one ``event`` frame per stored event, with the
status and head after it; ``run_finished`` after a run's last event; transient frames."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class StatusView(BaseModel):
    """A conversation's status and why (docs/contracts.md, RUN)."""

    model_config = ConfigDict(frozen=True)

    status: str
    reason: str | None = None


class EventFrame(BaseModel):
    """One stored event with what it means, as it stands after it: its resolved parent (None:
    a root), the action it answers (results only), the conversation's status and head."""

    model_config = ConfigDict(frozen=True)

    type: Literal["event"] = "event"
    seq: int
    event: dict[str, Any]
    parent_id: str | None
    answers: str | None
    status: StatusView
    head: str | None


class RunFinishedFrame(BaseModel):
    """Sent right after the event frame of a status change that ends a run (any status but
    running): ``seq`` is that event's."""

    model_config = ConfigDict(frozen=True)

    type: Literal["run_finished"] = "run_finished"
    seq: int
    status: str
    reason: str | None = None


class TransientFrame(BaseModel):
    """Something live that is not stored (e.g. a command's output as it runs): no seq, never
    counted by ``limit``, never replayed, no gap for a client's seq check."""

    model_config = ConfigDict(frozen=True, extra="allow")

    type: str
    stored: Literal[False] = False


def is_transient(frame: dict[str, Any]) -> bool:
    """Whether a decoded frame is transient (it carries ``"stored": false`` and no seq)."""
    return frame.get("stored") is False
