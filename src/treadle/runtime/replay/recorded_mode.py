"""REPLAY-RECORDED: a fresh conversation, in a temporary store that is deleted afterwards, is
driven by the real run loop over the recording (responses, results, user inputs, decisions);
its path must be the recorded one, event by event. The original is only read.
"""

from __future__ import annotations

import tempfile
from contextlib import closing
from pathlib import Path

from treadle.data.settings import SandboxSettings, SnapshotSettings
from treadle.errors import TreadleError
from treadle.events.model import Event
from treadle.runtime.conversation import Conversation
from treadle.runtime.parts import build_parts
from treadle.runtime.replay.compare import RECORDED, compare_paths
from treadle.runtime.replay.driver import drive
from treadle.runtime.replay.recorded_hooks import RecordedHooks
from treadle.runtime.replay.recorded_model import (
    RecordedModel,
    recorded_model_name,
    replay_condenser,
)
from treadle.runtime.replay.recorded_skills import RecordedSkills
from treadle.runtime.replay.recorded_tools import recorded_results_agent
from treadle.runtime.replay.recording import Recording, read_recording
from treadle.runtime.replay.report import Divergence, ReplayReport
from treadle.store.base import EventStore
from treadle.store.urls import open_store


def replay_recorded(
    store: EventStore, conversation_id: str, head: str | None = None
) -> ReplayReport:
    """Replay ``conversation_id`` up to ``head`` from its recording and report every event the
    runtime made differently (``ReplayInputError`` for bad input)."""
    recording = read_recording(store, conversation_id, head)
    report = ReplayReport("recorded", conversation_id, recording.head)
    report.recorded_events = len(recording.path)
    with tempfile.TemporaryDirectory(prefix="treadle-replay-") as folder:
        # Thrown away at the end: no fsync per append.
        replay_store = open_store(f"sqlite:///{Path(folder) / 'replay.db'}?durability=fast")
        try:
            replayed, stopped = _replayed_path(replay_store, recording, Path(folder))
        finally:
            replay_store.close()
    report.replayed_events = len(replayed)
    report.divergences = compare_paths(recording.path, replayed)
    if stopped is not None:
        report.divergences.append(stopped)
    return report


def _replayed_path(
    store: EventStore, recording: Recording, folder: Path
) -> tuple[list[Event], Divergence | None]:
    """The replay's path, and why the replay stopped early (None: it went to the end)."""
    # No tool runs: no workspace is read, no sandbox started, no snapshot taken. None of
    # these shapes the path's events (the system prompt holds the tools' schemas only).
    settings = recording.settings.model_copy(
        update={
            "workspace": str(folder / "workspace"),
            "sandbox": SandboxSettings(kind="none"),
            "snapshots": SnapshotSettings(enabled=False),
            # No hook runs either: their recorded decisions are given again (RecordedHooks).
            "hooks": None,
            "trust_workspace_hooks": False,
            # Nor any MCP server: its tools are stand-ins made from the recorded schemas.
            "mcp_servers": {},
        }
    )
    model = RecordedModel(recording, recorded_model_name(recording))
    stopped = None
    built = build_parts(store, settings, model=model)
    # The user's interrupts and pauses are made again on the conversation these parts run in.
    running: list[Conversation] = []
    parts = built.replace(
        agent=recorded_results_agent(
            built.agent,
            recording,
            interrupt=lambda: running[0].interrupt(),
            pause=lambda: running[0].pause(),
        ),
        hooks=RecordedHooks(recording),
        skills=RecordedSkills(recording),  # the workspace here is empty
        condenser=replay_condenser(recording, model),
    )
    with (
        closing(built),
        Conversation.create(store, settings, title="replay", parts=parts) as conversation,
    ):
        running.append(conversation)
        try:
            drive(conversation, recording, model)
        except TreadleError as error:
            stopped = Divergence(
                contract=RECORDED,
                message=f"the replay stopped: {error}",
                after_event_id=recording.path[-1].id if recording.path else None,
            )
        return conversation.active_path(), stopped
