"""A conversation's files put back from its snapshots: to the snapshot covering an event (a
branch switch or a fork with files), to any recorded snapshot (an undo), and the snapshots a
fork keeps of its parent's. Each refuses, changing nothing, when no snapshot fits."""

from __future__ import annotations

from collections.abc import Set

from treadle.data.views import RestoreView
from treadle.events.model import StateChangeEvent
from treadle.runtime.log import ConversationLog
from treadle.runtime.snapshots.facts import SNAPSHOT_KEY, SnapshotFact, snapshot_facts
from treadle.runtime.snapshots.restore import NoSnapshot, restore
from treadle.runtime.snapshots.workspace import WorkspaceSnapshots
from treadle.store.base import EventStore


def snapshots_or_refuse(
    snapshots: WorkspaceSnapshots | None, conversation_id: str
) -> WorkspaceSnapshots:
    if snapshots is None:
        raise NoSnapshot(
            f"conversation {conversation_id} takes no workspace snapshots (off in its settings, "
            "or its store has no local folder for them): nothing was changed"
        )
    return snapshots


def covering_or_refuse(
    snapshots: WorkspaceSnapshots, store: EventStore, conversation_id: str, event_id: str | None
) -> SnapshotFact:
    """The snapshot holding the files as they were at ``event_id``; ``NoSnapshot`` when none
    (and for an empty conversation's ``None``)."""
    fact = snapshots.covering(store, conversation_id, event_id) if event_id else None
    if fact is None:
        raise NoSnapshot(
            f"no snapshot covers event {event_id} of conversation {conversation_id} (none was "
            "taken after the batch before it, or a tool ran since): the workspace's files were "
            "left as they are"
        )
    return fact


def restore_event(
    snapshots: WorkspaceSnapshots, log: ConversationLog, event_id: str
) -> RestoreView:
    """Put back the files as they were at ``event_id`` (the caller holds the log's lock)."""
    fact = covering_or_refuse(snapshots, log.store, log.id, event_id)
    return restore(snapshots, log, fact.id, event=event_id, git_target=fact.git_tree)


def restore_recorded(
    snapshots: WorkspaceSnapshots, log: ConversationLog, snapshot_id: str
) -> RestoreView:
    """Put back any snapshot recorded in the conversation (the head does not move): the undo
    of a restore is the snapshot that restore took first."""
    recorded = {fact.id: fact for fact in snapshot_facts(log.store, log.id)}
    if snapshot_id not in recorded:
        raise NoSnapshot(
            f"snapshot {snapshot_id!r} is not recorded in conversation {log.id} "
            "(treadle snapshots lists them); nothing was changed"
        )
    return restore(snapshots, log, snapshot_id, git_target=recorded[snapshot_id].git_tree)


def copy_snapshots(
    store: EventStore,
    snapshots: WorkspaceSnapshots | None,
    parent_id: str,
    child_id: str,
    on_path: Set[str],
) -> None:
    """A fork keeps the snapshots of the events it copied (its own refs to them, so that
    pruning the parent's never loses the fork's files)."""
    kept = [fact for fact in snapshot_facts(store, parent_id) if fact.after_event in on_path]
    if not kept:
        return
    copied = [
        StateChangeEvent(key=SNAPSHOT_KEY, value=fact.value, parent_id=fact.after_event)
        for fact in kept
    ]
    store.append_batch(child_id, copied, move_head=False)
    if snapshots is not None:
        for fact in kept:
            snapshots.objects.keep(child_id, fact.id)
