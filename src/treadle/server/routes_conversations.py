"""REST routes for conversations: create, list, get, delete, and the user's intents (message,
run, pause, interrupt, confirm, reject, fork, move the head, raise a budget)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from treadle.api import (
    SEQ_MAX,
    Accepted,
    ActionChoice,
    ConversationList,
    ConversationView,
    CreateConversation,
    DiffView,
    ForkRequest,
    MoveHead,
    RaiseBudget,
    RejectRequest,
    RestoreRequest,
    RestoreView,
    RunRequest,
    SendMessage,
    SnapshotList,
    SnapshotView,
)
from treadle.data.status import controls_of
from treadle.events.model import event_to_dict
from treadle.runtime.budget import Budget
from treadle.runtime.isolation import read_isolation
from treadle.runtime.snapshots import (
    RESTORE_KEY,
    GitSnapshotStore,
    batch_diff,
    covering_snapshot,
    events_diff,
    open_snapshot_store,
    snapshot_list,
)
from treadle.runtime.snapshots.facts import facts
from treadle.runtime.status import INTERRUPTED_REASON
from treadle.server.continuing import settings_for_unset
from treadle.server.state import ServerState, server_state
from treadle.store.base import ConversationExists, ConversationInfo, ConversationNotFound

router = APIRouter(prefix="/api/conversations", tags=["conversations"])
State = Annotated[ServerState, Depends(server_state)]


def view(
    state: ServerState,
    info: ConversationInfo,
    *,
    isolation: bool = False,
    holders: Mapping[str, str] | None = None,
) -> ConversationView:
    """``isolation``: read the last run's isolation fact too (one conversation, not a list);
    ``holders``: the lease holders of the listed page, read together."""
    status, reason, here = state.status_and_here(info.id, info, holders)
    return ConversationView(
        id=info.id,
        title=info.title,
        status=status,
        status_reason=reason,
        head_id=info.head_id,
        event_count=info.event_count,
        created_at=info.created_at,
        updated_at=info.updated_at,
        running_here=here,
        controls=controls_of(status, interrupted=reason == INTERRUPTED_REASON),
        metadata=info.metadata,
        isolation=read_isolation(state.store, info.id) if isolation else None,
        prompt_tokens=info.prompt_tokens,
        completion_tokens=info.completion_tokens,
        cost_usd=info.cost_usd,
    )


@router.post("", status_code=201, response_model=ConversationView)
def create_conversation(
    body: CreateConversation, state: State, response: Response
) -> ConversationView:
    """Create a conversation; with a client-given id that exists already, return it (200)."""
    if body.id is not None:
        try:
            existing = state.store.get_conversation(body.id)
        except ConversationNotFound:
            pass
        else:
            response.status_code = 200
            return view(state, existing)
    settings = state.check_workspace(body.settings)
    try:
        info = state.runs.create(settings, conversation_id=body.id, title=body.title)
    except ConversationExists:
        if body.id is None:
            raise
        # Created by another request since we looked: the create stays idempotent.
        response.status_code = 200
        return view(state, state.store.get_conversation(body.id))
    return view(state, info)


@router.get("", response_model=ConversationList)
def list_conversations(
    state: State,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=SEQ_MAX)] = 0,
) -> ConversationList:
    infos = state.store.list_conversations(limit=limit + 1, offset=offset)
    more = len(infos) > limit
    listed = infos[:limit]
    # one read of the page's lease holders, not one per conversation
    holders = state.runs.leases.holders([info.id for info in listed])
    return ConversationList(
        items=[view(state, info, holders=holders) for info in listed],
        next_offset=offset + limit if more else None,
    )


@router.get("/{conversation_id}", response_model=ConversationView)
def get_conversation(conversation_id: str, state: State) -> ConversationView:
    return view(state, state.store.get_conversation(conversation_id), isolation=True)


@router.delete("/{conversation_id}", status_code=204)
def delete_conversation(conversation_id: str, state: State) -> Response:
    state.store.get_conversation(conversation_id)
    with state.runs.exclusive(conversation_id, "pause it before deleting it"):
        state.runs.forget(conversation_id)
        state.store.delete_conversation(conversation_id)
        objects = _snapshot_store(state)
        if objects is not None:  # its snapshots go with it (their files at the next gc)
            objects.forget(conversation_id)
    return Response(status_code=204)


@router.post("/{conversation_id}/messages", status_code=201)
def send_message(
    conversation_id: str, body: SendMessage, state: State, response: Response
) -> dict[str, Any]:
    """201 with the stored message; while a run holds the conversation (in any server), 202
    with the message it will store, after the results of the calls in flight."""
    state.runtime(conversation_id)  # 404 / 409
    event, queued = state.runs.send_message(conversation_id, body.text)
    if queued:
        response.status_code = 202
    return event_to_dict(event)


def _accepted(state: ServerState, conversation_id: str, operation: str) -> Accepted:
    status, _reason = state.status_of(conversation_id)
    return Accepted(conversation_id=conversation_id, operation=operation, status=status)


@router.post("/{conversation_id}/run", status_code=202, response_model=Accepted)
def run(conversation_id: str, state: State, body: RunRequest | None = None) -> Accepted:
    """Start a run in the background; 409 when it already runs (here or in another server).
    ``settings``: for a conversation that has none (imported), stored with it as it starts."""
    request = body or RunRequest()
    max_steps = request.max_steps
    if request.settings is None:
        state.runtime(conversation_id)  # 404 / 409 before starting a thread
        state.runs.start(conversation_id, lambda c: c.run(max_steps), "run")
    else:
        settings = settings_for_unset(state, conversation_id, request.settings)
        state.runs.start(
            conversation_id, lambda c: c.run(max_steps), "run", settings_if_missing=settings
        )
    return _accepted(state, conversation_id, "run")


@router.post("/{conversation_id}/pause", status_code=202, response_model=Accepted)
def pause(conversation_id: str, state: State) -> Accepted:
    """Pause now when nothing runs; else the process that runs it (any server) stops between
    calls."""
    state.runtime(conversation_id)  # 404 / 409
    state.runs.pause(conversation_id, "pause")
    return _accepted(state, conversation_id, "pause")


@router.post("/{conversation_id}/interrupt", status_code=202, response_model=Accepted)
def interrupt(conversation_id: str, state: State) -> Accepted:
    """Stop the calls in progress now (a command and the processes it started are killed),
    close each with an error marked ``interrupted: "user"``, then pause; sent to any server
    sharing the store, it reaches the process that runs the conversation within a second.
    When nothing runs the conversation, it pauses now."""
    state.runtime(conversation_id)  # 404 / 409
    state.runs.interrupt(conversation_id)
    return _accepted(state, conversation_id, "interrupt")


@router.post("/{conversation_id}/confirm", status_code=202, response_model=Accepted)
def confirm(conversation_id: str, state: State, body: ActionChoice | None = None) -> Accepted:
    """Run the confirmed pending calls in the background (all of them by default)."""
    state.runtime(conversation_id)  # 404 / 409
    chosen = (body or ActionChoice()).action_ids
    state.runs.start(
        conversation_id,
        lambda c: c.confirm(chosen),
        "confirm",
        check=lambda c: c.check_pending(chosen),
    )
    return _accepted(state, conversation_id, "confirm")


@router.post("/{conversation_id}/reject", response_model=Accepted)
def reject(conversation_id: str, state: State, body: RejectRequest | None = None) -> Accepted:
    body = body or RejectRequest()
    state.runtime(conversation_id)  # 404 / 409
    with state.runs.exclusive(conversation_id, "only calls waiting for confirmation take a reject"):
        conversation = state.runtime(conversation_id)
        # Under the lease: a call without a result while a run holds it is running, not waiting.
        conversation.check_pending(body.action_ids)
        conversation.reject(body.action_ids, reason=body.reason)
    return _accepted(state, conversation_id, "reject")


@router.post("/{conversation_id}/fork", status_code=201, response_model=ConversationView)
def fork(conversation_id: str, body: ForkRequest, state: State) -> ConversationView:
    """A new conversation holding the path up to the event and its snapshots. Files are not
    copied, unless ``restore_files`` with a ``workspace`` of its own: then that folder gets
    the files of the snapshot covering the event (409 ``no_snapshot`` when none does)."""
    if body.event_id is not None:
        state.store.get_event(conversation_id, body.event_id)  # 404 for an unknown event
    workspace = state.workspace_folder(body.workspace) if body.workspace is not None else None
    child = state.runtime(conversation_id).fork(
        body.event_id, title=body.title, restore_files=body.restore_files, workspace=workspace
    )
    child.close()  # the run manager opens it again to run it; shared tools stay the parent's
    shown = view(state, state.store.get_conversation(child.id))
    shown.restore = _last_restore(state, child.id)
    return shown


@router.put("/{conversation_id}/head", response_model=ConversationView)
def move_head(conversation_id: str, body: MoveHead, state: State) -> ConversationView:
    """Switch the active branch: the model's context follows the new head; with
    ``restore_files`` the workspace's files too (409 ``no_snapshot``, nothing changed, when
    no snapshot covers the event)."""
    state.store.get_event(conversation_id, body.event_id)  # 404 for an unknown event
    with state.runs.exclusive(conversation_id, "pause it before switching branch"):
        restored = state.runtime(conversation_id).switch_branch(
            body.event_id, restore_files=body.restore_files
        )
    shown = view(state, state.store.get_conversation(conversation_id), isolation=True)
    shown.restore = restored if restored else None
    return shown


@router.post("/{conversation_id}/restore", response_model=RestoreView)
def restore_snapshot(conversation_id: str, body: RestoreRequest, state: State) -> RestoreView:
    """Put a snapshot recorded in the conversation back into its workspace (the undo of a
    restore: its ``previous_snapshot``). The head does not move."""
    state.store.get_conversation(conversation_id)
    with state.runs.exclusive(conversation_id, "pause it before restoring files"):
        restored: RestoreView = state.runtime(conversation_id).restore_snapshot(body.snapshot)
    return restored


@router.get("/{conversation_id}/snapshots", response_model=SnapshotList)
def list_snapshots(
    conversation_id: str,
    state: State,
    covering: Annotated[
        str | None,
        Query(description="Only the snapshot a restore to this event would put back (or none)"),
    ] = None,
) -> SnapshotList:
    """The workspace snapshots recorded in the conversation, oldest first, with their sizes."""
    state.store.get_conversation(conversation_id)
    listed = snapshot_list(state.store, _snapshot_store(state), conversation_id)
    if covering is not None:
        found = covering_snapshot(state.store, conversation_id, covering)  # 404: unknown
        listed = [item for item in listed if found and item["seq"] == found.seq]
    return SnapshotList(items=[SnapshotView(**item) for item in listed])


@router.get("/{conversation_id}/events/{event_id}/files", response_model=DiffView)
def batch_files(conversation_id: str, event_id: str, state: State) -> DiffView:
    """What the batch this event starts (a response's first call) did to the workspace's
    files, as a unified diff (409 ``no_snapshot`` when it cannot be shown)."""
    found = batch_diff(state.store, _snapshot_store(state), conversation_id, event_id)
    return found


@router.get("/{conversation_id}/diff", response_model=DiffView)
def diff(
    conversation_id: str,
    state: State,
    a: Annotated[str, Query(description="The earlier event")],
    b: Annotated[str, Query(description="The later event")],
) -> DiffView:
    """The unified diff of the workspace's files from event ``a`` to event ``b`` (409
    ``no_snapshot`` when no snapshot covers one of them)."""
    for event_id in (a, b):
        state.store.get_event(conversation_id, event_id)  # 404 for an unknown event
    found = events_diff(state.store, _snapshot_store(state), conversation_id, a, b)
    return found


@router.patch("/{conversation_id}/budget", response_model=ConversationView)
def raise_budget(conversation_id: str, body: RaiseBudget, state: State) -> ConversationView:
    """Raise the conversation's budgets (stored in its settings, recorded in its log as a
    ``budget`` state change); 422 ``budget_lowered`` for one below the stored budget, 409
    while it runs. A run paused by a budget continues with ``POST /run``."""
    with state.runs.exclusive(conversation_id, "pause it before changing its budget"):
        state.runtime(conversation_id).raise_budget(
            Budget(body.max_cost_usd, body.max_total_tokens)
        )
    return view(state, state.store.get_conversation(conversation_id), isolation=True)


def _snapshot_store(state: ServerState) -> GitSnapshotStore | None:
    return open_snapshot_store(state.store, state.policy.provides.snapshot_data_dir)


def _last_restore(state: ServerState, conversation_id: str) -> RestoreView | None:
    done = [
        event.value
        for _seq, event in facts(state.store, conversation_id, RESTORE_KEY)
        if isinstance(event.value, dict) and event.value.get("phase") == "done"
    ]
    if not done:
        return None
    value = done[-1]
    return RestoreView(
        snapshot=value["snapshot"],
        previous_snapshot=value["previous_snapshot"],
        changed=list(value["changed"]),
        kept=list(value.get("kept") or ()),
        restore_id=value["restore_id"],
    )
