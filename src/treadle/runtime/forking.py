"""A fork's record: a new conversation holding a parent's path up to an event, the
snapshots of those events, the parent's settings (moved to the fork's own workspace when it
has one), its origin, and a waiting status when calls on the path wait for an answer.
Which parts run it (the parent's shared, or its own) is the ``Conversation``'s choice."""

from __future__ import annotations

from pathlib import Path

from treadle.events.links import pending_actions
from treadle.runtime.settings import SETTINGS_KEY, ConversationSettings
from treadle.runtime.snapshots import WorkspaceSnapshots
from treadle.runtime.snapshots.putting_back import copy_snapshots
from treadle.runtime.states import status_after_head_move
from treadle.runtime.status import status_event
from treadle.store.base import EventStore


def record_fork(
    store: EventStore,
    parent_id: str,
    head: str | None,
    *,
    title: str | None,
    workspace: Path | None,
    snapshots: WorkspaceSnapshots | None,
) -> str:
    """Store the fork of ``parent_id`` at ``head`` (None: an empty fork); its id."""
    path = store.path_to_root(parent_id, head) if head else []
    info = store.get_conversation(parent_id)
    metadata = dict(info.metadata)
    metadata["origin"] = {"forked_from": parent_id, "event_id": head}
    if workspace is not None and SETTINGS_KEY in metadata:
        moved = ConversationSettings.model_validate(metadata[SETTINGS_KEY]).model_copy(
            update={"workspace": str(workspace)}
        )
        metadata[SETTINGS_KEY] = moved.to_metadata()
    child = store.create_conversation(
        title=title or f"fork of {info.title or parent_id}", metadata=metadata
    )
    if path:
        store.append_batch(child.id, path)
        copy_snapshots(store, snapshots, parent_id, child.id, {event.id for event in path})
    if path and pending_actions(path):  # its calls wait for an answer there too
        status, why = status_after_head_move(True)
        store.append(child.id, status_event(status, path[-1].id, why), move_head=False)
    return child.id
