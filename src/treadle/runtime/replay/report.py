"""What a replay reports: the divergences, each naming its contract (REPLAY-RECORDED,
REPLAY-RERUN) and the events, call and tool concerned, and the JSON shape ``treadle replay
--json`` prints (docs/replay.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Mode = Literal["recorded", "rerun"]


@dataclass(frozen=True)
class Divergence:
    """One difference between the recording and the replay.

    ``event_id``: the recorded event (None: the replay made an event the recording does not
    have); ``replayed_event_id``: the replay's (None: the replay lacks the recorded event);
    ``fields``: the fields that differ; ``expected``/``actual``: their values (ids of the
    recording translated to the replay's)."""

    contract: str
    message: str
    event_id: str | None = None
    replayed_event_id: str | None = None
    action_id: str | None = None
    tool_call_id: str | None = None
    tool: str | None = None
    kind: str | None = None
    fields: list[str] = field(default_factory=list)
    expected: Any = None
    actual: Any = None
    after_event_id: str | None = None
    """Where it stands: the recorded event just before it."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ActionCheck:
    """Rerun: whether one recorded action's result came out the same."""

    action_id: str
    tool_call_id: str
    tool: str
    same: bool
    replayed_action_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReplayReport:
    mode: Mode
    conversation: str
    head: str
    divergences: list[Divergence] = field(default_factory=list)
    replayed_events: int = 0
    recorded_events: int = 0
    new_conversation: str | None = None
    workspace: str | None = None
    """Rerun: the folder the tools ran in (the new conversation's workspace)."""
    starting_files: str | None = None
    """Rerun: where the files came from (``snapshot <id>`` or ``workspace <dir>``)."""
    actions: list[ActionCheck] = field(default_factory=list)
    file_changes: list[dict[str, str]] | None = None
    """Rerun: ``{"status": A|M|D, "path"}`` from the recorded last snapshot to the rerun's
    files at the end (None: no recorded snapshot to compare with)."""

    @property
    def same(self) -> bool:
        return not self.divergences

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "conversation": self.conversation,
            "head": self.head,
            "same": self.same,
            "divergences": [divergence.to_json() for divergence in self.divergences],
            "recorded_events": self.recorded_events,
            "replayed_events": self.replayed_events,
            "new_conversation": self.new_conversation,
            "workspace": self.workspace,
            "starting_files": self.starting_files,
            "actions": [check.to_json() for check in self.actions],
            "file_changes": self.file_changes,
        }
