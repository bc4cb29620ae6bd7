"""One workspace's snapshots as a conversation uses them: take one after a batch and record
it in the log; find the one that covers an event; open the store a conversation's snapshots
live in."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treadle.data.settings import SnapshotSettings
from treadle.data.views import DiffView
from treadle.events.model import ActionEvent, Event
from treadle.runtime.log import ConversationLog
from treadle.runtime.snapshots.facts import (
    SNAPSHOT_KEY,
    SnapshotFact,
    covering,
    may_have_changed_files,
    snapshot_facts,
)
from treadle.runtime.snapshots.gitstore import GitSnapshotStore, TreeSnapshot
from treadle.runtime.snapshots.location import snapshot_root, store_files
from treadle.runtime.text import storable
from treadle.runtime.tools.builtin import FILE_SAFE_TOOLS
from treadle.store.base import EventStore, StoredEvent

logger = logging.getLogger(__name__)

CHANGED_SHOWN = 100
"""At most this many changed paths are listed in a snapshot's record (the count is exact)."""


_OPENED: dict[str, GitSnapshotStore] = {}
_OPENED_LOCK = threading.Lock()


def open_snapshot_store(store: EventStore, data_dir: Path | None = None) -> GitSnapshotStore | None:
    """The snapshot store of ``store`` (None when it has no local folder: see ``location``),
    one object per folder in this process: its per-workspace locks keep two conversations of
    one workspace from running git on its index at once, and the trees it remembers spare each
    new conversation a ``git write-tree``."""
    root = snapshot_root(store.url, data_dir)
    if root is None:
        return None
    key = os.path.realpath(root)
    with _OPENED_LOCK:
        objects = _OPENED.get(key)
        if objects is None:
            objects = _OPENED[key] = GitSnapshotStore(root)
        return objects


@dataclass
class WorkspaceSnapshots:
    """Snapshots of the folder ``root`` in ``objects`` for conversations of ``store``."""

    objects: GitSnapshotStore
    root: Path
    settings: SnapshotSettings
    store_url: str
    _last: dict[str, Any] | None = None
    """The last snapshot this object took of the workspace (None after a restore)."""
    _covers_to: tuple[str, str] | None = None
    """(conversation, event) up to which the last snapshot this object recorded is known to
    cover the path: the event it follows, moved on over the file-safe batches since."""
    _kept: set[tuple[str, str]] = field(default_factory=set)
    """(conversation, snapshot) refs this object wrote."""

    def take(self) -> tuple[TreeSnapshot, TreeSnapshot | None]:
        """The workspace's files, and (``include_git``) its ``.git`` folder's as a second tree
        (git itself never stores a ``.git`` inside a tree)."""
        git_folder = self.root / ".git"
        skipped: list[str] = []
        with_git = self.settings.include_git and git_folder.is_dir() and not git_folder.is_symlink()
        if git_folder.exists() and not with_git:
            skipped.append(".git/ (the workspace's own git folder; settings can include it)")
        never = [self.objects.root, *store_files(self.store_url)]
        files = self.objects.take(
            self.root,
            max_file_bytes=self.settings.max_file_bytes,
            never=never,
            extra_skipped=skipped,
            exclude=self.settings.exclude,
            workspace_ignore_files=self.settings.workspace_ignore_files,
        )
        if not with_git:
            return files, None
        dot_git = self.objects.take(
            git_folder, max_file_bytes=self.settings.max_file_bytes, never=never
        )
        return files, dot_git

    def record(
        self, log: ConversationLog, *, read: bool = True, ride_along: bool = False, **extra: Any
    ) -> dict[str, Any] | None:
        """Take a snapshot, keep it for the log's conversation and record it beside the head
        (the event that ends the batch). Returns the recorded value (None: nothing recorded).
        ``read=False`` (no call of the batch could change a file): nothing is recorded when
        the last snapshot this object recorded still covers the head (``covering``: only
        file-safe results since it on the path); else that snapshot is recorded again, the
        files not read (a tool of the user's that declares itself file-safe). ``ride_along``:
        the fact may wait for the run's next write (``ConversationLog.record_fact``); a
        snapshot something else depends on at once (a restore's rollback point) never does."""
        after_event = log.head
        if after_event is None:
            return None
        if not read and self._still_covers(log):
            self._covers_to = (log.id, after_event)  # the next batch's walk stops here
            return None  # a restore to any event since finds the last one (facts.covering)
        started = time.perf_counter()
        value: dict[str, Any]
        if not read and self._last is not None:
            value = {
                **self._last,
                "after_event": after_event,
                "changed": [],
                "changed_count": 0,
                "bytes_added": 0,
                "seconds": round(time.perf_counter() - started, 4),
                "read": False,
            }
            self._keep(log.id, str(value["id"]))
            log.record_fact(SNAPSHOT_KEY, storable(value), ride_along=ride_along)
            self._covers_to = (log.id, after_event)
            return value
        taken, dot_git = self.take()
        self._keep(log.id, taken.id)
        value = {
            "id": taken.id,
            "after_event": after_event,
            "files": taken.files,
            "bytes_added": taken.bytes_added,
            "skipped": taken.skipped,
            "skipped_count": taken.skipped_count,
            "changed": taken.changed[:CHANGED_SHOWN],
            "changed_count": len(taken.changed),
            "seconds": round(time.perf_counter() - started, 4),
            **extra,
        }
        if dot_git is not None:
            self._keep(log.id, dot_git.id)
            value["git_tree"] = dot_git.id  # the .git folder's files (include_git)
            value["bytes_added"] += dot_git.bytes_added
        log.record_fact(SNAPSHOT_KEY, storable(value), ride_along=ride_along)
        keys = ("id", "files", "skipped", "skipped_count", "git_tree")
        self._last = {key: value[key] for key in keys if key in value}
        self._covers_to = (log.id, after_event)
        return value

    def _still_covers(self, log: ConversationLog) -> bool:
        """Whether the last snapshot recorded here covers the log's head: it follows an event
        of the path and only file-safe results came after it (the rule ``covering`` reads the
        log by). A walk back over the batch just made, not over the path."""
        if self._last is None or self._covers_to is None or self._covers_to[0] != log.id:
            return False
        covered = self._covers_to[1]
        for event in reversed(log.path()):
            if event.id == covered:
                return True
            if may_have_changed_files(event):
                return False
        return False

    def _keep(self, conversation_id: str, snapshot_id: str) -> None:
        if (conversation_id, snapshot_id) not in self._kept:  # a ref written once is enough
            self.objects.keep(conversation_id, snapshot_id)
            self._kept.add((conversation_id, snapshot_id))

    def forget_last(self) -> None:
        """The files may have changed other than by a batch (a restore, a hand edit between
        runs): the next record reads them."""
        self._last = None
        self._covers_to = None

    def covering(
        self, store: EventStore, conversation_id: str, event_id: str
    ) -> SnapshotFact | None:
        return covering(
            store.path_to_root(conversation_id, event_id), snapshot_facts(store, conversation_id)
        )


def try_record(
    snapshots: WorkspaceSnapshots | None, log: ConversationLog, read: bool = True
) -> None:
    """The run loop's hook: a snapshot after a batch, never a reason for the run to stop (a
    failure is logged; the log then simply has no snapshot for that batch)."""
    if snapshots is None:
        return
    try:
        snapshots.record(log, read=read, ride_along=True)
    except Exception:
        logger.warning("no snapshot of %s after %s", snapshots.root, log.head, exc_info=True)


def events_diff(
    store: EventStore, objects: GitSnapshotStore | None, conversation_id: str, a: str, b: str
) -> DiffView:
    """The unified diff of the files from event ``a`` to event ``b`` (``NoSnapshot`` naming
    the event no snapshot covers; ``EventNotFound`` for an unknown event)."""
    from treadle.runtime.snapshots.restore import NoSnapshot

    recorded = snapshot_facts(store, conversation_id)
    found: list[str] = []
    for event_id in (a, b):
        fact = covering(store.path_to_root(conversation_id, event_id), recorded)
        if fact is None:
            raise NoSnapshot(
                f"no snapshot covers event {event_id} of conversation {conversation_id}: "
                "there is nothing to compare its files with"
            )
        found.append(fact.id)
    if objects is None:
        raise NoSnapshot(
            f"the snapshots of conversation {conversation_id} are not on this machine (its "
            "store has no local folder for them here)"
        )
    changes = objects.changes(found[0], found[1]) if found[0] != found[1] else []
    text = objects.diff(found[0], found[1]) if changes else ""
    return DiffView(
        event_a=a,
        event_b=b,
        snapshot_a=found[0],
        snapshot_b=found[1],
        changed=[c.path for c in changes],
        diff=text,
    )


def snapshot_list(
    store: EventStore, objects: GitSnapshotStore | None, conversation_id: str
) -> list[dict[str, Any]]:
    """The conversation's snapshots, oldest first, each with its size (files and bytes it
    holds) and what it added to the store."""
    sizes: dict[str, tuple[int, int]] = {}
    listed = []
    for fact in snapshot_facts(store, conversation_id):
        if objects is not None and fact.id not in sizes:
            sizes[fact.id] = objects.size(fact.id) if objects.exists(fact.id) else (0, -1)
        files, total = sizes.get(fact.id, (int(fact.value.get("files", 0)), -1))
        listed.append(
            {
                "id": fact.id,
                "after_event": fact.after_event,
                "seq": fact.seq,
                "files": files,
                "bytes": total,
                "bytes_added": fact.value.get("bytes_added"),
                "changed_count": fact.value.get("changed_count"),
                "skipped_count": fact.value.get("skipped_count"),
                "reason": fact.value.get("reason"),
            }
        )
    return listed


def covering_snapshot(
    store: EventStore, conversation_id: str, event_id: str
) -> SnapshotFact | None:
    """The snapshot a restore to ``event_id`` would put back (see ``facts.covering``)."""
    return covering(
        store.path_to_root(conversation_id, event_id), snapshot_facts(store, conversation_id)
    )


def batch_diff(
    store: EventStore, objects: GitSnapshotStore | None, conversation_id: str, event_id: str
) -> DiffView:
    """What the batch that ``event_id`` starts (a response's first call) did to the files:
    from the snapshot covering its parent to the first snapshot taken after it on a path
    through it (``NoSnapshot`` when either is missing, e.g. a batch still running)."""
    from treadle.runtime.snapshots.restore import NoSnapshot

    event = store.get_event(conversation_id, event_id)
    recorded = snapshot_facts(store, conversation_id)
    parent = event.event.parent_id
    before = (
        covering(store.path_to_root(conversation_id, parent), recorded)
        if parent and parent != "__root__"
        else None
    )
    if (
        before is not None
        and objects is not None
        and _file_safe_batch(store, conversation_id, event)
    ):
        # No snapshot after a batch of file-safe calls: the files are the ones before it.
        return DiffView(
            event_a=str(parent),
            event_b=event_id,
            snapshot_a=before.id,
            snapshot_b=before.id,
            changed=[],
            diff="",
        )
    after = None
    for fact in recorded:
        if fact.seq > event.seq and any(
            e.id == event_id for e in store.path_to_root(conversation_id, fact.after_event)
        ):
            after = fact
            break
    if before is None or after is None or objects is None:
        raise NoSnapshot(
            f"no snapshots before and after the batch of event {event_id}: its files cannot "
            "be shown"
        )
    changes = objects.changes(before.id, after.id) if before.id != after.id else []
    text = objects.diff(before.id, after.id) if changes else ""
    return DiffView(
        event_a=str(parent),
        event_b=after.after_event,
        snapshot_a=before.id,
        snapshot_b=after.id,
        changed=[c.path for c in changes],
        diff=text,
    )


def _file_safe_batch(store: EventStore, conversation_id: str, first: StoredEvent) -> bool:
    """Whether the batch ``first`` starts is only calls of file-safe built-in tools (its
    actions follow one another, sharing the response's id)."""
    event: Event | None = first.event
    while isinstance(event, ActionEvent):
        if event.tool_name not in FILE_SAFE_TOOLS:
            return False
        response = event.llm_response_id
        event = next(
            (
                child.event
                for child in store.children(conversation_id, event.id)
                if isinstance(child.event, ActionEvent) and child.event.llm_response_id == response
            ),
            None,
        )
    return first.event.kind == "action"
