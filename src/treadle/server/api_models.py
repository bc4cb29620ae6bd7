"""Request and response bodies of the agent server's REST API (shared with the typed client)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from treadle.runtime.settings import ConversationSettings


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateConversation(_Body):
    id: str | None = Field(
        default=None, description="Client-given id: creating it again is a no-op"
    )
    title: str | None = None
    settings: ConversationSettings


class ConversationView(BaseModel):
    id: str
    title: str | None
    status: str
    status_reason: str | None = None
    head_id: str | None
    event_count: int
    created_at: datetime
    updated_at: datetime
    running_here: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)


class ConversationList(BaseModel):
    items: list[ConversationView]
    next_offset: int | None


class SendMessage(_Body):
    text: str = Field(min_length=1, max_length=1_000_000)


class RunRequest(_Body):
    max_steps: int = Field(default=50, ge=1, le=10_000)


class ActionChoice(_Body):
    action_ids: list[str] | None = Field(default=None, description="Default: every pending call")


class RejectRequest(ActionChoice):
    reason: str = "User rejected the action"


class ForkRequest(_Body):
    event_id: str | None = Field(default=None, description="Default: the head")
    title: str | None = None


class MoveHead(_Body):
    event_id: str


class StoredEventView(BaseModel):
    seq: int
    event: dict[str, Any]


class EventPageView(BaseModel):
    items: list[StoredEventView]
    next_cursor: int | None


class CountView(BaseModel):
    count: int


class TreeView(BaseModel):
    head: str | None
    heads: list[str]
    branch_points: list[str]


class Accepted(BaseModel):
    conversation_id: str
    operation: Literal["run", "confirm", "reject", "pause", "interrupt"]
    status: str
