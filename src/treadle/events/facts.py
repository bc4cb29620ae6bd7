"""The facts Treadle records about a run: one pydantic model per ``state_change`` key, and the
registry that says which keys exist.

A fact is a ``state_change`` event (never model-visible, never a head) whose ``value`` has the
shape its key's model gives. The runtime's writes are checked against the registry when they are
appended (``check_fact``): an unknown key, or a value its model refuses, is a ``FactRefused``
naming the key and the field, and nothing is stored. Facts a log brought with it (an OpenHands
conversation's own keys, an older Treadle's shapes) are not checked: they stay as they are, and
``read_fact`` gives ``None`` for one that is not of the registry's shape, so readers fall back
instead of failing.

Each model names the fields Treadle writes and their types; a fact may carry more fields (a
newer Treadle's), which are kept. ``treadle schema`` shows every model (``facts_json_schema``).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from treadle.errors import TreadleError
from treadle.events.fact_keys import (
    BUDGET_KEY,
    CALL_IDS_KEY,
    CONTEXT_LIMIT_KEY,
    EVAL_ATTEMPT_KEY,
    HEAD_KEY,
    HOOK_KEY,
    ISOLATION_KEY,
    MCP_SERVERS_KEY,
    MODEL_ERROR_KEY,
    MODEL_KEY,
    PAUSE_REQUEST_KEY,
    QUEUED_MESSAGE_KEY,
    REPLAY_KEY,
    RESTORE_KEY,
    SKILLS_KEY,
    SNAPSHOT_KEY,
    STATUS_KEY,
)

_F = TypeVar("_F", bound="Fact")


StatusName = Literal[
    "idle", "running", "waiting_for_confirmation", "paused", "finished", "error", "stuck"
]


class FactRefused(TreadleError, ValueError):
    """A fact the runtime was about to record has an unknown key or a value of the wrong shape
    (a defect of the code writing it: nothing was stored)."""


class Fact(BaseModel):
    """The value of one kind of fact. Fields of a newer Treadle are kept (``extra``)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class StatusFact(Fact):
    """The conversation's status from now on (RUN's state machine), and why."""

    status: StatusName
    reason: str | None = None


class HeadFact(Fact):
    """An explicit head move (a branch switch): streams see the new head."""

    head: str


class ModelErrorFact(Fact):
    """A model answer the runtime could not use, kept masked."""

    error: str
    raw_response: str


class RenamedCall(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    action_id: str
    original: str
    id: str
    contract: str = Field(description="PROJECT-DUP-CALL or LINK-UNIQUE")


class CallIdsFact(Fact):
    """Call ids of one response the runtime replaced (PROJECT-DUP-CALL / LINK-UNIQUE)."""

    llm_response_id: str
    renamed: tuple[RenamedCall, ...]


class PauseRequestFact(Fact):
    """A user asked the run in progress to stop at its next safe point."""

    kind: Literal["pause", "interrupt"]


class QueuedMessageFact(Fact):
    """A user message sent while calls ran, stored with that id after their results."""

    event_id: str
    text: str


class SnapshotFact(Fact):
    """The workspace's files after the batch ending at ``after_event``."""

    id: str
    after_event: str
    files: int | None = None
    bytes_added: int = 0
    skipped: tuple[str, ...] = ()
    skipped_count: int = 0
    changed: tuple[str, ...] = ()
    changed_count: int = 0
    seconds: float = 0.0
    read: bool | None = Field(
        default=None, description="False: the files were not read again (no tool could change them)"
    )
    reason: str | None = Field(default=None, description="e.g. 'before restore': a restore's undo")
    git_tree: str | None = Field(default=None, description="The .git folder's tree, when kept")


class RestoreFact(Fact):
    """The workspace's files put back to ``snapshot``; ``previous_snapshot`` holds what they
    were. ``phase`` started, then done (or rolled_back after a crash)."""

    snapshot: str
    previous_snapshot: str | None
    phase: Literal["started", "done", "rolled_back"]
    restore_id: str | None = None
    event: str | None = None
    changed: tuple[str, ...] = ()
    changed_count: int = 0
    kept: tuple[str, ...] = ()
    recovered: bool = False


class IsolationFact(Fact):
    """What the tools ran under, at the start of each run (ISOLATION); null limits are none;
    ``override`` says why it is not what the stored settings ask for."""

    sandbox: Literal["bubblewrap", "none"]
    network: str = Field(description="off, on, or allow=HOST[:PORT],...")
    mounts_ro: tuple[str, ...] = ()
    limits: dict[str, int | None] = Field(
        default_factory=dict, description="memory_mib, processes, file_size_mib, cpu_seconds"
    )
    override: str | None = None
    memory_scope: Literal["sandbox", "process"] | None = None
    tmpfs_mib: int | None = None
    layers: tuple[str, ...] = ()
    user: dict[str, Any] | None = Field(default=None, description="{uid, gid, capabilities}")


class MCPServerState(BaseModel):
    """One MCP server as a run found it. Never a command, variable, header or URL."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    transport: Literal["stdio", "http"]
    sandbox: str | None = Field(default=None, description="null for a server reached by URL")
    network: str | None = None
    status: Literal["connected", "failed"]
    error: str | None = None
    tools: tuple[str, ...] = ()


class MCPServersFact(Fact):
    """The MCP servers the run's conversation connected or failed to, at the start of a run."""

    servers: tuple[MCPServerState, ...]


class ReplayFact(Fact):
    """On a conversation ``treadle replay --mode rerun`` made: what it reran (phase started),
    then how it compared (phase done)."""

    phase: Literal["started", "done"]
    of: str | None = None
    event_id: str | None = None
    mode: str | None = None
    starting_files: Any = None
    same: bool | None = None
    divergent_actions: tuple[str, ...] = ()
    file_changes: int | None = None


class HookFact(Fact):
    """One run of a hook; ``exit_code`` null when it timed out or did not start."""

    hook: Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop"]
    command: str
    exit_code: int | None
    seconds: float
    decision: Literal["block", "context", "none"]
    action_id: str | None = None
    failure: str | None = None
    ask: bool = False


class LoadedSkill(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    source: str
    triggers: tuple[str, ...] = ()
    bytes: int


class SkippedSkill(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    source: str
    error: str


class SkillsFact(Fact):
    """The workspace's skills as loaded when the conversation started, and the files refused."""

    loaded: tuple[LoadedSkill, ...] = ()
    skipped: tuple[SkippedSkill, ...] = ()


class EvalAttemptFact(Fact):
    """How an eval's attempt at a task in this conversation ended; only ``result`` counts."""

    eval: str
    task: str
    attempt: int
    outcome: Literal["result", "worker_died", "failed", "abandoned"]
    error: str | None = Field(default=None, description="Why an attempt gave no result")


class ModelSide(BaseModel):
    """One model of a ``model`` fact; never a key, never a script's inline responses."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: Literal["litellm", "scripted"]
    model: str | None = None
    base_url: str | None = None
    script: str | None = None


class ModelFact(Fact):
    """A continued conversation switched to another model from that point on."""

    from_: ModelSide = Field(alias="from")
    to: ModelSide


class BudgetChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    from_: float | None = Field(alias="from")
    to: float


class BudgetFact(Fact):
    """Budgets raised on a stored conversation, each ``{from, to}`` (never lowered)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_cost_usd: BudgetChange | None = None
    max_total_tokens: BudgetChange | None = None


class ContextLimitFact(Fact):
    """A context window learned from a provider's refusal, kept for the conversation:
    ``source`` provider (the refusal stated it) or halved (half the refused request)."""

    tokens: int = Field(gt=0)
    source: Literal["provider", "halved"]
    refused_tokens: int
    budget: int | None = Field(description="The condenser's token budget after learning it")


FACTS: dict[str, type[Fact]] = {
    STATUS_KEY: StatusFact,
    HEAD_KEY: HeadFact,
    MODEL_ERROR_KEY: ModelErrorFact,
    CALL_IDS_KEY: CallIdsFact,
    PAUSE_REQUEST_KEY: PauseRequestFact,
    QUEUED_MESSAGE_KEY: QueuedMessageFact,
    SNAPSHOT_KEY: SnapshotFact,
    RESTORE_KEY: RestoreFact,
    ISOLATION_KEY: IsolationFact,
    MCP_SERVERS_KEY: MCPServersFact,
    REPLAY_KEY: ReplayFact,
    HOOK_KEY: HookFact,
    SKILLS_KEY: SkillsFact,
    EVAL_ATTEMPT_KEY: EvalAttemptFact,
    MODEL_KEY: ModelFact,
    BUDGET_KEY: BudgetFact,
    CONTEXT_LIMIT_KEY: ContextLimitFact,
}
"""Every fact key Treadle writes, and the shape of its value."""


def check_fact(key: str, value: Any) -> Fact:
    """``value`` as the model of ``key``; ``FactRefused`` naming the key (and the field) for
    an unknown key or a value of another shape."""
    model = FACTS.get(key)
    if model is None:
        known = ", ".join(sorted(FACTS))
        raise FactRefused(
            f"state_change key {key!r} is not a fact Treadle records (known: {known}); "
            "add its model to treadle.events.facts.FACTS"
        )
    try:
        return model.model_validate(value)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in error.errors()
        )
        raise FactRefused(
            f"state_change {key!r} has a value of the wrong shape: {problems}"
        ) from None


def read_fact(model: type[_F], value: Any) -> _F | None:
    """A stored value as ``model``; None when it is not of that shape (an imported or an older
    fact): readers fall back instead of failing."""
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


def facts_json_schema() -> dict[str, Any]:
    """``{key: JSON Schema of its value}`` for every fact key."""
    return {key: model.model_json_schema(by_alias=True) for key, model in FACTS.items()}


__all__ = [
    "FACTS",
    "Fact",
    "FactRefused",
    "check_fact",
    "facts_json_schema",
    "read_fact",
]
