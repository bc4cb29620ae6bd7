"""Forking a conversation: a new conversation holding a parent's path up to an event, the
snapshots of those events, the parent's settings (moved to the fork's own workspace when it
has one), its origin, and a waiting status when calls on the path wait for an answer
(``record_fork``); then the parts that run it: the parent's, shared and left for the parent
to close, or its own in its own workspace, filled from a snapshot when asked (``fork``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from treadle.events.links import pending_actions
from treadle.runtime.errors import ForkNeedsWorkspace
from treadle.runtime.log import ConversationLog
from treadle.runtime.settings import SETTINGS_KEY, ConversationSettings
from treadle.runtime.snapshots import NoSnapshot, WorkspaceSnapshots, restore
from treadle.runtime.snapshots.putting_back import (
    copy_snapshots,
    covering_or_refuse,
    snapshots_or_refuse,
)
from treadle.runtime.states import status_after_head_move
from treadle.runtime.status import status_event
from treadle.runtime.workspace.local import LocalWorkspace
from treadle.store.audit_summary import keep_imported
from treadle.store.base import EventStore

if TYPE_CHECKING:
    from treadle.runtime.conversation import Conversation


def fork(
    parent: Conversation,
    event_id: str | None,
    *,
    title: str | None,
    restore_files: bool,
    workspace: str | None,
) -> Conversation:
    """The fork of ``parent`` at ``event_id`` (``Conversation.fork`` says what it holds)."""
    head = event_id or parent.head
    if restore_files and workspace is None:
        raise ForkNeedsWorkspace(
            "a fork that restores files needs a workspace of its own (a fork shares its "
            "parent's workspace otherwise, whose files would change under it): give one"
        )
    covering = None
    if restore_files:
        snapshots = snapshots_or_refuse(parent.snapshots, parent.id)
        covering = covering_or_refuse(snapshots, parent.store, parent.id, head)
    policy = parent.parts.policy
    root = None
    if workspace is not None:  # refused here, before a conversation exists, if outside
        root = LocalWorkspace(workspace, create=True, within=policy.allows.workspace_root).root
    child_id = record_fork(
        parent.store, parent.id, head, title=title, workspace=root, snapshots=parent.snapshots
    )
    if workspace is None:
        # The parent's parts (its tools: the parent closes them), hooks of its own.
        shared_parts = parent.parts.replace(hooks=parent.hooks.copied())
        log = ConversationLog(parent.store, child_id, parent.callbacks)
        return type(parent)(log, shared_parts, owns_parts=False)
    forked = type(parent).open(
        parent.store,
        child_id,
        model=parent.agent.model,
        secrets=parent.secrets,
        callbacks=parent.callbacks,
        policy=policy,
    )
    if covering is not None:
        if forked.snapshots is None:
            forked.close()
            raise NoSnapshot(f"snapshots are off for the fork {child_id}: nothing restored")
        with forked.log.lock:
            git_tree = covering.git_tree
            restore(forked.snapshots, forked.log, covering.id, event=head, git_target=git_tree)
    return forked


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
        # The copied path is the child's whole log so far: its audit checkpoint costs one
        # walk of what is in memory here, and spares the child's first audit the whole log.
        keep_imported(store, child.id, path)
        copy_snapshots(store, snapshots, parent_id, child.id, {event.id for event in path})
    if path and pending_actions(path):  # its calls wait for an answer there too
        status, why = status_after_head_move(True)
        store.append(child.id, status_event(status, path[-1].id, why), move_head=False)
    return child.id
