"""Workspace snapshots (docs/snapshots.md): the files after each batch of calls, kept in a
content-addressed store outside the workspace, so that a branch of the event tree and the
files can agree again: restore on switch and fork, diff between two events, undo.

``gitstore``: the object store (git plumbing, private index per workspace); ``location``:
where a store's snapshots live; ``facts``: snapshots and restores as the log records them,
and which snapshot covers an event; ``workspace``: one workspace's snapshots as a
conversation takes them; ``restore``: putting one back, safe against a kill.
"""

from treadle.runtime.snapshots.facts import (
    RESTORE_KEY,
    SNAPSHOT_KEY,
    SnapshotFact,
    covering,
    snapshot_facts,
)
from treadle.runtime.snapshots.gitstore import GitSnapshotStore, SnapshotError, TreeSnapshot
from treadle.runtime.snapshots.location import snapshot_root
from treadle.runtime.snapshots.restore import (
    NoSnapshot,
    RestoreBusy,
    recover,
    restore,
)
from treadle.runtime.snapshots.workspace import (
    WorkspaceSnapshots,
    batch_diff,
    covering_snapshot,
    events_diff,
    open_snapshot_store,
    snapshot_list,
    try_record,
)

__all__ = [
    "RESTORE_KEY",
    "SNAPSHOT_KEY",
    "GitSnapshotStore",
    "NoSnapshot",
    "RestoreBusy",
    "SnapshotError",
    "SnapshotFact",
    "TreeSnapshot",
    "WorkspaceSnapshots",
    "batch_diff",
    "covering",
    "covering_snapshot",
    "events_diff",
    "open_snapshot_store",
    "recover",
    "restore",
    "snapshot_facts",
    "snapshot_list",
    "snapshot_root",
    "try_record",
]
