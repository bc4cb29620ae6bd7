"""REPLAY-RERUN: the recorded responses, with the tools really run again, in a fresh workspace
filled from the first snapshot (or from a folder of starting files), written as a new
conversation linked to the original (a ``replay`` fact and its ``origin``); each call's result
is compared with the recorded one, and the files at the end with the recorded last snapshot.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treadle.data.network import network_looser
from treadle.data.settings import SETTINGS_KEY, ConversationSettings, SandboxSettings
from treadle.events.fact_keys import REPLAY_KEY as REPLAY_KEY
from treadle.runtime.conversation import Conversation
from treadle.runtime.log import ConversationLog
from treadle.runtime.parts import build_parts
from treadle.runtime.replay.compare import compare_results
from treadle.runtime.replay.driver import drive
from treadle.runtime.replay.recorded_model import (
    RecordedModel,
    recorded_model_name,
    replay_condenser,
)
from treadle.runtime.replay.recorded_skills import RecordedSkills
from treadle.runtime.replay.recording import Recording, ReplayInputError, read_recording
from treadle.runtime.replay.report import ReplayReport
from treadle.runtime.settings import SettingsPolicy
from treadle.runtime.snapshots import GitSnapshotStore, open_snapshot_store, snapshot_facts
from treadle.runtime.snapshots.gitstore import EMPTY_TREE
from treadle.runtime.workspace.sandbox import check_bubblewrap
from treadle.store.base import EventStore

WORKSPACE_MARK = "<workspace>"
"""What each run's workspace folder is written as before results are compared (a command's
``cwd``, a path the editor shows): the rerun works in another folder by design."""


@dataclass(frozen=True)
class StartingFiles:
    """Where the rerun's files come from: a recorded snapshot, or a folder copied."""

    snapshot: str | None = None
    git_tree: str | None = None
    folder: Path | None = None

    def describe(self) -> str:
        return f"snapshot {self.snapshot}" if self.snapshot else f"workspace {self.folder}"


def rerun(
    store: EventStore,
    conversation_id: str,
    head: str | None = None,
    *,
    workspace: Path | None = None,
    into: Path | None = None,
    policy: SettingsPolicy | None = None,
    allowed: SandboxSettings | None = None,
) -> ReplayReport:
    """Run ``conversation_id``'s recorded responses up to ``head`` again with real tools.
    ``workspace``: the starting files when the conversation has no first snapshot; ``into``:
    the rerun's own folder (absent or empty; default: a new one in the temp folder, kept: it
    is the new conversation's workspace); ``allowed``: the least isolation this command allows
    (default: bubblewrap, network off), below which the recording's is raised (``no_weaker``).
    ``ReplayInputError`` before anything is written when the rerun cannot start."""
    policy = policy or SettingsPolicy()
    recording = read_recording(store, conversation_id, head)
    objects = open_snapshot_store(store, policy.provides.snapshot_data_dir)
    start = _starting_files(recording, objects, workspace)
    sandbox, raised = no_weaker(recording.sandbox(), allowed or SandboxSettings())
    if sandbox.kind == "bubblewrap":
        check_bubblewrap()  # SandboxUnavailable: refused before anything is made
    target = _fresh_folder(into, conversation_id)
    try:
        _fill(target, start, objects)
    except BaseException:
        if into is None:  # ours, and nothing refers to it yet
            shutil.rmtree(target, ignore_errors=True)
        raise
    settings = recording.settings.model_copy(update={"workspace": str(target), "sandbox": sandbox})
    log = _linked_conversation(store, recording, settings, start, raised)
    model = RecordedModel(recording, recorded_model_name(recording))
    built = build_parts(store, settings, model=model, policy=policy)
    # The model gets the skills the recording got, whatever the starting files hold now,
    # and the recorded run's condenser (see replay_condenser).
    parts = built.replace(
        skills=RecordedSkills(recording), condenser=replay_condenser(recording, model)
    )
    with closing(built), Conversation.open(store, log.id, parts=parts) as conversation:
        drive(conversation, recording, model)
        replayed = conversation.active_path()
    report = ReplayReport("rerun", conversation_id, recording.head)
    report.new_conversation = log.id
    report.workspace = str(target)
    report.starting_files = start.describe()
    report.recorded_events = len(recording.path)
    report.replayed_events = len(replayed)
    folders = [recording.settings.workspace, str(target)]
    report.actions, report.divergences = compare_results(
        recording.path, recording.results, replayed, lambda value: _marked(value, folders)
    )
    report.file_changes = _file_changes(recording, objects, store, log.id)
    log.record_fact(
        REPLAY_KEY,
        {
            "phase": "done",
            "same": report.same,
            "divergent_actions": [d.action_id for d in report.divergences],
            "file_changes": None if report.file_changes is None else len(report.file_changes),
        },
    )
    return report


def no_weaker(
    recorded: SandboxSettings, allowed: SandboxSettings
) -> tuple[SandboxSettings, str | None]:
    """The sandbox a rerun runs under: the recording's, but never less isolated than
    ``allowed`` (what the command allows). A log may come from anywhere (an import, another
    machine): its ``isolation`` fact saying ``none`` or ``network on``, a host path it mounted,
    a limit it lifted, is no permission here. Returns the sandbox and, when it differs from
    the recording's, why."""
    if recorded.kind == "none":
        if allowed.kind == "none":
            return recorded, None
        return (
            allowed,
            f"recorded without a sandbox; rerun under {allowed.kind} (use --sandbox none to allow less)",
        )
    if allowed.kind == "none":
        return recorded, None
    changes: dict[str, Any] = {}
    why: list[str] = []
    looser = network_looser(recorded.network, allowed.network)
    if looser is not None:
        changes["network"] = allowed.network
        why.append(
            f"recorded with {looser}; rerun with network {allowed.network} "
            "(use --network to allow more)"
        )
    unlisted = [mount for mount in recorded.mounts_ro if mount not in allowed.mounts_ro]
    if unlisted:
        changes["mounts_ro"] = tuple(m for m in recorded.mounts_ro if m in allowed.mounts_ro)
        why.append(
            f"recorded with host paths {', '.join(unlisted)} shown read-only; rerun without "
            "them (use --mount-ro PATH to allow one)"
        )
    lifted = recorded.limits.within(allowed.limits)
    if lifted:
        bounds = {name: getattr(allowed.limits, name) for name in lifted}
        changes["limits"] = recorded.limits.model_copy(update=bounds)
        shown = ", ".join(f"{name} {getattr(recorded.limits, name)}" for name in lifted)
        why.append(f"recorded with looser limits ({shown}); rerun within this command's")
    if not changes:
        return recorded, None
    return recorded.model_copy(update=changes), "; ".join(why)


def _linked_conversation(
    store: EventStore,
    recording: Recording,
    settings: ConversationSettings,
    start: StartingFiles,
    raised: str | None = None,
) -> ConversationLog:
    """The rerun's new conversation (the original's metadata, ``settings``, an ``origin``
    naming what it reruns) and its first ``replay`` fact; its log."""
    original = recording.conversation_id
    metadata: dict[str, Any] = dict(recording.metadata)
    metadata[SETTINGS_KEY] = settings.to_metadata()
    metadata["origin"] = {"replay_of": original, "event_id": recording.head, "mode": "rerun"}
    title = store.get_conversation(original).title or original
    info = store.create_conversation(title=f"rerun of {title}", metadata=metadata)
    log = ConversationLog(store, info.id)
    log.record_fact(
        REPLAY_KEY,
        {
            "of": original,
            "event_id": recording.head,
            "mode": "rerun",
            "starting_files": start.describe(),
            "phase": "started",
            **({"isolation_raised": raised} if raised else {}),
        },
    )
    return log


def _starting_files(
    recording: Recording, objects: GitSnapshotStore | None, workspace: Path | None
) -> StartingFiles:
    first = recording.first_snapshot
    if first is not None and objects is not None and objects.exists(first.id):
        return StartingFiles(snapshot=first.id, git_tree=first.git_tree)
    if workspace is not None:
        if not workspace.is_dir():
            raise ReplayInputError(f"--workspace {workspace}: no such folder")
        return StartingFiles(folder=workspace.resolve())
    raise ReplayInputError(
        f"conversation {recording.conversation_id} has no snapshot of the files it started "
        "from (snapshots were off, or its store keeps none): give --workspace DIR with the "
        "starting files; nothing was run"
    )


def _fresh_folder(into: Path | None, conversation_id: str) -> Path:
    if into is None:
        return Path(tempfile.mkdtemp(prefix=f"treadle-rerun-{conversation_id[:8]}-")).resolve()
    if into.exists() and (not into.is_dir() or any(into.iterdir())):
        raise ReplayInputError(
            f"--into {into}: the rerun needs a folder of its own, absent or empty"
        )
    into.mkdir(parents=True, exist_ok=True)
    return into.resolve()


def _fill(target: Path, start: StartingFiles, objects: GitSnapshotStore | None) -> None:
    """Put the starting files into the empty ``target``."""
    if start.folder is not None:
        shutil.copytree(start.folder, target, symlinks=True, dirs_exist_ok=True)
        return
    assert objects is not None
    assert start.snapshot is not None
    objects.checkout(target, objects.changes(EMPTY_TREE, start.snapshot))
    if start.git_tree:
        (target / ".git").mkdir()
        objects.checkout(target / ".git", objects.changes(EMPTY_TREE, start.git_tree))


def _marked(value: Any, folders: list[str]) -> Any:
    """``value`` with each workspace folder written ``WORKSPACE_MARK`` (longest first)."""
    if isinstance(value, str):
        for folder in sorted(folders, key=len, reverse=True):
            value = value.replace(folder, WORKSPACE_MARK)
        return value
    if isinstance(value, dict):
        return {key: _marked(item, folders) for key, item in value.items()}
    if isinstance(value, list):
        return [_marked(item, folders) for item in value]
    return value


def _file_changes(
    recording: Recording, objects: GitSnapshotStore | None, store: EventStore, rerun_id: str
) -> list[dict[str, str]] | None:
    """The files from the recorded last snapshot to the rerun's last one (None when either
    is missing: nothing to compare)."""
    recorded = recording.last_snapshot
    taken = snapshot_facts(store, rerun_id)
    if recorded is None or not taken or objects is None:
        return None
    return [
        {"status": change.status, "path": change.path}
        for change in objects.changes(recorded.id, taken[-1].id)
    ]


__all__ = ["REPLAY_KEY", "rerun"]
