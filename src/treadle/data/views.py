"""Response bodies of the agent server's REST API: what the server sends and the typed client
reads. Events travel as their JSON objects; ``EventItem``/``EventPage`` are the client's typed
reading of the same answers (each event parsed into its kind's model)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from treadle.data.isolation import IsolationView
from treadle.data.status import ConversationStatus
from treadle.events.model import Event


class RestoreView(BaseModel):
    """A restore of the workspace's files: the snapshot put back, the one holding the files
    as they were (restore it to undo), the paths changed, and the paths kept (files no
    snapshot holds, never written over)."""

    snapshot: str
    previous_snapshot: str
    changed: list[str]
    kept: list[str] = Field(default_factory=list)
    restore_id: str


class SnapshotView(BaseModel):
    id: str
    after_event: str
    seq: int
    files: int
    bytes: int
    """Bytes of the files it holds (-1: not in this server's snapshot store)."""
    bytes_added: int | None = None
    changed_count: int | None = None
    skipped_count: int | None = None
    reason: str | None = None


class SnapshotList(BaseModel):
    items: list[SnapshotView]


class DiffView(BaseModel):
    """The workspace's files from ``event_a`` to ``event_b``, as a unified diff."""

    event_a: str
    event_b: str
    snapshot_a: str
    snapshot_b: str
    changed: list[str]
    diff: str


class ConversationView(BaseModel):
    id: str
    title: str | None
    status: ConversationStatus
    status_reason: str | None = None
    head_id: str | None
    event_count: int
    created_at: datetime
    updated_at: datetime
    running_here: bool = False
    controls: list[str] = Field(
        default_factory=list,
        description="what its status offers: run, pause, interrupt, confirm (api.status.CONTROLS)",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    restore: RestoreView | None = None
    """Set by a head move or a fork that restored the workspace's files."""
    isolation: IsolationView | None = Field(
        default=None,
        description="What the last run's tools ran under (its recorded isolation fact); "
        "given by GET /api/conversations/{id}, not in lists; null before any run",
    )
    prompt_tokens: int = Field(
        default=0, description="tokens sent in all the model calls of the log, every branch"
    )
    completion_tokens: int = Field(default=0, description="tokens the model calls returned")
    cost_usd: float = Field(default=0.0, description="cost of those calls in USD (a float sum)")


class ConversationList(BaseModel):
    items: list[ConversationView]
    next_offset: int | None


class StoredEventView(BaseModel):
    seq: int
    event: dict[str, Any]


class EventPageView(BaseModel):
    items: list[StoredEventView]
    next_cursor: int | None


class EventItem(BaseModel):
    """One stored event as the client reads it: its seq and the event, typed by kind."""

    seq: int
    event: Event


class EventPage(BaseModel):
    """A page of ``GET /events`` as the client reads it; ``next_cursor`` continues it."""

    items: list[EventItem]
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


class ViolationView(BaseModel):
    """One broken contract: its contract name (docs/contracts.md), the events at fault, a one-line explanation."""

    contract: str
    event_ids: list[str]
    message: str


class AuditView(BaseModel):
    """``GET /audit`` (the ``treadle audit --json`` object): violations, notices that are not
    violations, the pending calls on the head's path, counts by kind, the heads.

    The server lists the first ``violations_limit`` violations (default 1000) in log order;
    ``violations_total``, ``violation_counts`` (by contract name) and ``truncated`` count them
    all. (``treadle audit --json`` lists every one and has no such fields: then the list is
    the whole.)"""

    violations: list[ViolationView]
    pending: list[str]
    counts: dict[str, int]
    heads: list[str]
    head: str | None = None
    notices: list[ViolationView] = Field(default_factory=list)
    violations_total: int | None = None
    violation_counts: dict[str, int] | None = None
    truncated: bool = False

    @property
    def total(self) -> int:
        """Violations found, listed or not."""
        return len(self.violations) if self.violations_total is None else self.violations_total

    @property
    def clean(self) -> bool:
        return self.total == 0


class Accepted(BaseModel):
    conversation_id: str
    operation: Literal["run", "confirm", "reject", "pause", "interrupt"]
    status: ConversationStatus
