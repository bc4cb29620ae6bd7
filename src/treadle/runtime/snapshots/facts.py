"""Snapshots and restores as the log records them (``state_change`` facts ``snapshot`` and
``restore``), and the one rule for which snapshot covers an event."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from treadle.events.fact_keys import RESTORE_KEY as RESTORE_KEY
from treadle.events.fact_keys import SNAPSHOT_KEY as SNAPSHOT_KEY
from treadle.events.model import AgentErrorEvent, Event, ObservationEvent, StateChangeEvent
from treadle.runtime.tools.builtin import FILE_SAFE_TOOLS
from treadle.store.base import EventQuery, EventStore

BEFORE_RESTORE = "before restore"
"""The reason of the snapshot a restore takes of the files it replaces (its undo)."""
PAGE = 500


@dataclass(frozen=True)
class SnapshotFact:
    """One recorded snapshot: the fact's seq and event id, and its value."""

    seq: int
    event_id: str
    value: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.value["id"])

    @property
    def after_event(self) -> str:
        return str(self.value["after_event"])

    @property
    def git_tree(self) -> str | None:
        """The ``.git`` folder's tree, when the settings included it."""
        tree = self.value.get("git_tree")
        return tree if isinstance(tree, str) else None


def facts(store: EventStore, conversation_id: str, key: str) -> list[tuple[int, StateChangeEvent]]:
    """Every ``state_change`` with ``key`` in the conversation, in seq order."""
    found: list[tuple[int, StateChangeEvent]] = []
    after = -1
    while True:
        page = store.search(
            conversation_id,
            EventQuery(kinds=["state_change"], text=f'"{key}"', after_seq=after, limit=PAGE),
        )
        for stored in page.items:
            event = stored.event
            if isinstance(event, StateChangeEvent) and event.key == key:
                found.append((stored.seq, event))
        if page.next_cursor is None:
            return found
        after = page.next_cursor


def snapshot_facts(store: EventStore, conversation_id: str) -> list[SnapshotFact]:
    """The conversation's snapshots in the order they were taken."""
    return [
        SnapshotFact(seq, event.id, event.value)
        for seq, event in facts(store, conversation_id, SNAPSHOT_KEY)
        if isinstance(event.value, dict) and isinstance(event.value.get("id"), str)
    ]


def may_have_changed_files(event: Event) -> bool:
    """Whether ``event`` is a tool's result after which the files may differ: any result but
    one of a built-in tool that declares it changes no file (think, finish, task_tracker)."""
    return isinstance(event, ObservationEvent | AgentErrorEvent) and (
        event.tool_name not in FILE_SAFE_TOOLS
    )


def covering(path: Sequence[Event], snapshots: Sequence[SnapshotFact]) -> SnapshotFact | None:
    """The snapshot that holds the files as they were at the end of ``path`` (root..event):
    the newest one taken after an event of the path, provided no tool that may change files
    returned after that event (such a result means files may have changed that no snapshot
    holds). A batch of file-safe calls records no snapshot: the one before it covers it.

    A snapshot a restore took first (``reason: "before restore"``) never covers its event:
    it holds whatever was on disk then (files an earlier restore or a switch without files
    put there, which need not be that event's), and it is kept as the restore's undo, named
    by its id. Among several snapshots of a batch after the same event, the last taken wins."""
    by_event: dict[str, SnapshotFact] = {}
    for fact in snapshots:
        if fact.value.get("reason") != BEFORE_RESTORE:
            by_event[fact.after_event] = fact
    found: SnapshotFact | None = None
    for event in path:
        if found is not None and may_have_changed_files(event):
            found = None  # a tool ran (or may have) after the snapshot
        here = by_event.get(event.id)
        if here is not None:
            found = here
    return found
