"""Request and response bodies of the agent server's REST API (shared with the typed client)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from treadle.runtime.settings import ConversationSettings
from treadle.store.common import CONVERSATION_ID_MAX, CONVERSATION_ID_RULE, check_conversation_id

SEQ_MIN = -1
SEQ_MAX = 2**63 - 1
"""Seq cursors: -1 (before the first event) .. the largest seq a store can hold (int64)."""
ConversationId = Annotated[
    str,
    Field(min_length=1, max_length=CONVERSATION_ID_MAX, description=CONVERSATION_ID_RULE),
    AfterValidator(check_conversation_id),
]

TITLE_MAX = 1000


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _only_text(cls, data: Any) -> Any:
        # JSON may spell a lone surrogate ("\ud800"): it decodes to a str that no store (nor
        # any response) can encode, so it is refused here, for every body, naming where it is.
        where = surrogate_in(data)
        if where is not None:
            raise ValueError(f"{where} holds a lone surrogate (U+D800..U+DFFF): send valid UTF-8")
        return data


def surrogate_in(value: Any, where: str = "body") -> str | None:
    """Where in a decoded JSON value a string (or a key) holds a lone surrogate, or None."""
    stack = [(value, where)]
    while stack:  # no recursion: a deeply nested body must not exhaust the stack
        item, at = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return at
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and not _encodable(key):
                    return f"{at}: a key"
                stack.append((child, f"{at}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{at}[{index}]") for index, child in enumerate(item))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class CreateConversation(_Body):
    id: ConversationId | None = Field(
        default=None, description="Client-given id: creating it again is a no-op"
    )
    title: str | None = Field(default=None, max_length=TITLE_MAX)
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
    reason: str = Field(default="User rejected the action", max_length=100_000)


class ForkRequest(_Body):
    event_id: str | None = Field(default=None, description="Default: the head")
    title: str | None = Field(default=None, max_length=TITLE_MAX)


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


class BranchView(BaseModel):
    """A line of descent ending at one head (treadle.events.branches.Branch)."""

    id: str = Field(description="the branch's first event")
    head: str = Field(description="its last event, a head (TREE-HEAD)")
    head_seq: int
    length: int = Field(description="events on the path root..head")
    own: int = Field(description="events on this branch itself, from its first to its head")
    base: str | None = Field(description="the event it hangs from; null for a root")
    parent: str | None = Field(description="id of the branch holding ``base``")
    time_us: int = Field(description="the head's timestamp, microseconds since the epoch")
    active: bool = Field(description="its head is the conversation's head")


class BranchPointView(BaseModel):
    id: str
    seq: int
    depth: int = Field(description="events above it on its path")
    line: str = Field(description="id of the branch it is on")
    children: list[str] = Field(description="its children that are not state changes")


class TreeView(BaseModel):
    """The whole branch summary, read from the store's branch index in O(branches)."""

    head: str | None
    heads: list[str]
    branch_points: list[str]
    branches: list[BranchView] = []
    points: list[BranchPointView] = []
    events: dict[str, dict[str, Any]] = Field(
        default={}, description="each branch's first event and head, and the stored head, by id"
    )


class Accepted(BaseModel):
    conversation_id: str
    operation: Literal["run", "confirm", "reject", "pause", "interrupt"]
    status: str
