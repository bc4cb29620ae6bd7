"""The event stream's frames (docs/stream.md): one ``event`` frame per stored event, with the
status, head and usage totals after it; ``run_finished`` after a run's last event; transient frames."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from treadle.data.isolation import IsolationView
from treadle.data.transcript import TranscriptUpdate


class StatusView(BaseModel):
    """A conversation's status and why (docs/contracts.md, RUN)."""

    model_config = ConfigDict(frozen=True)

    status: str
    reason: str | None = None
    controls: list[str] = Field(
        default_factory=list,
        description="what the status offers: run, pause, interrupt, confirm (api.status.CONTROLS)",
    )


class UsageView(BaseModel):
    """Tokens and cost of every model call in the log so far, every branch (``events.usage``);
    the cost rounded to a billionth of a dollar."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class EventFrame(BaseModel):
    """One stored event with what it means, as it stands after it: its resolved parent (None:
    a root), the action it answers (results only), the conversation's status, head and usage
    totals, what it changes in the transcript, and (an isolation fact) the isolation view."""

    model_config = ConfigDict(frozen=True)

    type: Literal["event"] = "event"
    seq: int
    event: dict[str, Any]
    parent_id: str | None
    answers: str | None
    status: StatusView
    head: str | None
    usage: UsageView
    transcript: list[TranscriptUpdate] = Field(
        default_factory=list,
        description="what the event changes in the transcript (events.view.TranscriptFollower)",
    )
    isolation: IsolationView | None = Field(
        default=None, description="an isolation fact's view, with the runs without a sandbox"
    )


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


class OutputFrame(TransientFrame):
    """What a call in progress printed lately (a terminal command's output so far), masked:
    ``text`` starts ``offset`` characters into the call's output. An offset past what a
    client holds means output it did not get (dropped for a slow client, or a chunk's limit);
    the call's stored result replaces it all when it lands."""

    model_config = ConfigDict(frozen=True, extra="allow")

    type: Literal["output"] = "output"
    conversation_id: str
    action_id: str
    tool_call_id: str
    tool_name: str
    offset: int
    text: str


StreamFrame = EventFrame | RunFinishedFrame | OutputFrame | TransientFrame


def typed_frame(frame: dict[str, Any]) -> StreamFrame:
    """A decoded frame as its model (a transient type this version does not know stays a
    plain ``TransientFrame``, its fields kept)."""
    if is_transient(frame):
        if frame.get("type") == "output":
            with contextlib.suppress(ValidationError):  # another version's shape: kept plain
                return OutputFrame.model_validate(frame)
        return TransientFrame.model_validate(frame)
    if frame.get("type") == "run_finished":
        return RunFinishedFrame.model_validate(frame)
    return EventFrame.model_validate(frame)


def is_transient(frame: dict[str, Any]) -> bool:
    """Whether a decoded frame is transient (it carries ``"stored": false`` and no seq)."""
    return frame.get("stored") is False
