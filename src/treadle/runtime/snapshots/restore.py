"""Putting a snapshot back into a workspace, safe against a kill at any moment.

The order: snapshot the workspace as it is (hand changes are never lost: that snapshot is the
undo), write a journal naming every change, record ``restore`` ``phase: started``, change the
files, record ``phase: done``, drop the journal. A process killed in between leaves the
journal; whoever opens the workspace next finishes the restore (files written again whole:
idempotent) and records ``done`` with ``recovered: true`` — or, when the log never said
``started`` (no file was touched yet), drops it and records ``rolled_back``. So after any kill
the workspace holds the old files or the new ones, and the log's last ``restore`` fact says
which. One restore at a time per workspace, across processes (an ``flock`` the kernel drops
with a killed process).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from treadle.data.views import RestoreView
from treadle.runtime.errors import ConversationError
from treadle.runtime.log import ConversationLog
from treadle.runtime.snapshots.facts import RESTORE_KEY, facts
from treadle.runtime.snapshots.gitstore import (
    EMPTY_TREE,
    Change,
    GitSnapshotStore,
    SnapshotError,
)
from treadle.runtime.snapshots.workspace import WorkspaceSnapshots
from treadle.store.base import ConversationNotFound, EventStore

CHANGED_SHOWN = 1000
"""At most this many changed paths are listed in a restore's record (the count is exact)."""
BUSY_POLL_S = 0.05
"""How often ``recover`` tries a workspace's restore lock again while another holds it."""


class NoSnapshot(ConversationError):
    """No snapshot covers the event a restore asked for: nothing was changed."""


class RestoreBusy(ConversationError):
    """Another restore of the same workspace is in progress (here or in another process)."""


def restore(
    snapshots: WorkspaceSnapshots,
    log: ConversationLog,
    target: str,
    *,
    event: str | None = None,
    git_target: str | None = None,
) -> RestoreView:
    """Make the workspace hold snapshot ``target`` (recorded in ``log``; ``event``: the event
    the restore was asked for, if any; ``git_target``: the snapshot's ``.git`` tree, restored
    too when the settings include ``.git``). ``SnapshotError`` for an unknown snapshot."""
    objects = snapshots.objects
    if not objects.exists(target):
        raise SnapshotError(f"no snapshot {target!r} in the snapshot store {objects.root}")
    with _workspace_lock(objects, snapshots.root, wait=False):
        _finish_unfinished(objects, snapshots.root, log.store)
        before = snapshots.record(log, reason="before restore")
        if before is None:
            raise NoSnapshot(f"conversation {log.id} has no events: nothing to restore onto")
        previous = str(before["id"])
        changes = objects.changes(previous, target)
        # A path the snapshot holds, where the workspace has a file that the "before"
        # snapshot does not hold (ignored, too large): not ours to overwrite.
        kept = [
            c.path for c in changes if c.status == "A" and os.path.lexists(snapshots.root / c.path)
        ]
        kept_set = set(kept)
        apply = [c for c in changes if c.path not in kept_set]
        git_apply: list[Change] = []
        if git_target and snapshots.settings.include_git:
            # No .git folder now (a fork's new workspace): it is made whole.
            previous_git = str(before.get("git_tree") or EMPTY_TREE)
            git_apply = objects.changes(previous_git, git_target)
        changed = [c.path for c in apply] + [f".git/{c.path}" for c in git_apply]
        restore_id = uuid.uuid4().hex
        value = {
            "restore_id": restore_id,
            "snapshot": target,
            "previous_snapshot": previous,
            "event": event,
            "changed": changed[:CHANGED_SHOWN],
            "changed_count": len(changed),
            "kept": kept[:CHANGED_SHOWN],
        }
        journal = _journal(objects, snapshots.root)
        _write_journal(
            journal,
            {
                **value,
                "conversation": log.id,
                "workspace": str(snapshots.root),
                "changes": [[c.status, c.path, c.mode, c.blob] for c in apply],
                "git_changes": [[c.status, c.path, c.mode, c.blob] for c in git_apply],
            },
        )
        log.record_fact(RESTORE_KEY, {**value, "phase": "started"})
        snapshots.forget_last()
        objects.checkout(snapshots.root, apply)
        if git_apply:
            objects.checkout(snapshots.root / ".git", git_apply)
        log.record_fact(RESTORE_KEY, {**value, "phase": "done"})
        journal.unlink()
        return RestoreView(
            snapshot=target,
            previous_snapshot=previous,
            changed=changed,
            kept=kept,
            restore_id=restore_id,
        )


def recover(
    objects: GitSnapshotStore, workspace: Path, store: EventStore, *, busy_wait_s: float = 10.0
) -> str | None:
    """Finish or roll back a restore of ``workspace`` a killed process left unfinished:
    "done", "rolled_back", or None (nothing unfinished, or a restore still running after
    ``busy_wait_s``: it finishes by itself). The lock is waited for (polled) rather than given
    up at once: what held it may be going (the process of a restore that just ended, or was
    killed, with a child not yet gone), and giving up left the log saying "started" for good."""
    journal = _journal(objects, workspace)
    deadline = time.monotonic() + busy_wait_s
    while journal.exists():
        try:
            with _workspace_lock(objects, workspace, wait=False):
                return _finish_unfinished(objects, workspace, store)
        except RestoreBusy:
            if time.monotonic() >= deadline:
                return None  # a live restore: it finishes by itself
            time.sleep(BUSY_POLL_S)
    return None


def _finish_unfinished(objects: GitSnapshotStore, workspace: Path, store: EventStore) -> str | None:
    journal = _journal(objects, workspace)
    try:
        plan = json.loads(journal.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        journal.unlink(missing_ok=True)  # cut short while written: nothing was touched yet
        return None
    log = ConversationLog(store, plan["conversation"])
    try:
        phases = {
            event.value.get("phase")
            for _seq, event in facts(store, log.id, RESTORE_KEY)
            if isinstance(event.value, dict) and event.value.get("restore_id") == plan["restore_id"]
        }
    except ConversationNotFound:
        phases = None  # the conversation is gone: finish the files, nobody to tell
    value = {
        key: plan[key]
        for key in (
            "restore_id",
            "snapshot",
            "previous_snapshot",
            "event",
            "changed",
            "changed_count",
            "kept",
        )
    }
    outcome: str | None
    if phases is not None and "started" not in phases:
        log.record_fact(RESTORE_KEY, {**value, "phase": "rolled_back"})
        outcome = "rolled_back"
    else:
        if phases is None or "done" not in phases:
            objects.checkout(workspace, [Change(*item) for item in plan["changes"]])
            if plan.get("git_changes"):
                objects.checkout(workspace / ".git", [Change(*i) for i in plan["git_changes"]])
            if phases is not None:
                log.record_fact(RESTORE_KEY, {**value, "phase": "done", "recovered": True})
        outcome = "done"
    journal.unlink(missing_ok=True)
    return outcome


def _journal(objects: GitSnapshotStore, workspace: Path) -> Path:
    return objects.root / "restores" / f"{GitSnapshotStore.workspace_key(workspace)}.json"


def _write_journal(path: Path, plan: dict[str, Any]) -> None:
    temporary = path.with_suffix(".tmp")
    with temporary.open("w") as handle:
        json.dump(plan, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@contextmanager
def _workspace_lock(objects: GitSnapshotStore, workspace: Path, *, wait: bool) -> Iterator[None]:
    folder = objects.root / "restores"
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / f"{GitSnapshotStore.workspace_key(workspace)}.lock"
    handle = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RestoreBusy(
                f"another restore of workspace {workspace} is in progress; try again when it ends"
            ) from None
        yield
    finally:
        os.close(handle)  # closing drops the lock
