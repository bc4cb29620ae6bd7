"""REST and WebSocket routes over a conversation's events: search and count with the store's
filters and seq cursors, one event, the path, the projection, the audit, the tree, the stream."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from treadle.api import (
    SEQ_MAX,
    SEQ_MIN,
    AuditView,
    CountView,
    EventPageView,
    StoredEventView,
    TreeView,
)
from treadle.data.transcript import TranscriptPage
from treadle.events.model import event_to_dict
from treadle.events.projection import project_messages
from treadle.runtime.transcript import TRANSCRIPT_PAGE, transcript_page
from treadle.server.audit_cache import VIOLATIONS_LIMIT, audit_cache
from treadle.server.errors import OUTAGES
from treadle.server.security import ws_key_required
from treadle.server.state import ServerState, server_state
from treadle.server.stream import Delivery, Listener, seeded_state
from treadle.store.base import (
    MAX_SEQ,
    ConversationNotFound,
    EventQuery,
    StoredEvent,
    StoreError,
)

router = APIRouter(prefix="/api/conversations/{conversation_id}", tags=["events"])
State = Annotated[ServerState, Depends(server_state)]

VIOLATIONS_LIMIT_MAX = 100_000
"""Most violations one audit answer lists (the totals count every one)."""
REPLAY_PAGE = 1000
BATCH = 200
"""Most events in one frame of a batched stream."""

_STORE_FAILURES: tuple[type[Exception], ...] = (StoreError, *OUTAGES)
"""What a join or a replay may fail with: the store's errors and its outages."""


def _split(values: list[str] | None) -> list[str] | None:
    """``?kinds=a,b`` and ``?kinds=a&kinds=b`` both mean [a, b]."""
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part]


def event_query(
    kinds: Annotated[list[str] | None, Query()] = None,
    sources: Annotated[list[str] | None, Query()] = None,
    after_seq: Annotated[int | None, Query(ge=SEQ_MIN, le=SEQ_MAX)] = None,
    before_seq: Annotated[int | None, Query(ge=SEQ_MIN, le=SEQ_MAX)] = None,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
    branch_head: str | None = None,
    text: Annotated[str | None, Query(max_length=1000)] = None,
    order: Literal["asc", "desc"] = "asc",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventQuery:
    return EventQuery(
        kinds=_split(kinds),
        sources=_split(sources),
        after_seq=after_seq,
        before_seq=before_seq,
        time_from=time_from,
        time_to=time_to,
        branch_head=branch_head,
        text=text,
        order=order,
        limit=limit,
    )


Filters = Annotated[EventQuery, Depends(event_query)]


def _view(stored: StoredEvent) -> StoredEventView:
    return StoredEventView(seq=stored.seq, event=event_to_dict(stored.event))


@router.get("/events", response_model=EventPageView)
def search_events(conversation_id: str, query: Filters, state: State) -> EventPageView:
    """A page of events; pass ``next_cursor`` as ``after_seq`` (asc) or ``before_seq`` (desc)."""
    page = state.store.search(conversation_id, query)
    return EventPageView(items=[_view(item) for item in page.items], next_cursor=page.next_cursor)


@router.get("/events/count", response_model=CountView)
def count_events(conversation_id: str, query: Filters, state: State) -> CountView:
    return CountView(count=state.store.count(conversation_id, query))


@router.get("/events/{event_id}", response_model=StoredEventView)
def get_event(conversation_id: str, event_id: str, state: State) -> StoredEventView:
    return _view(state.store.get_event(conversation_id, event_id))


@router.get("/path")
def get_path(
    conversation_id: str,
    state: State,
    head: str | None = None,
    limit: Annotated[int | None, Query(ge=0, le=100_000)] = None,
) -> list[dict[str, Any]]:
    """The active path root..head (TREE-PATH), or its last ``limit`` events."""
    return [event_to_dict(e) for e in state.store.path_to_root(conversation_id, head, limit)]


@router.get("/messages")
def get_messages(
    conversation_id: str, state: State, head: str | None = None
) -> list[dict[str, Any]]:
    """The OpenAI-format messages the model would be sent for the active path (PROJECT-*)."""
    return project_messages(state.store.path_to_root(conversation_id, head))


@router.get("/audit", response_model=AuditView)
def get_audit(
    conversation_id: str,
    state: State,
    head: str | None = None,
    violations_limit: Annotated[int, Query(ge=0, le=VIOLATIONS_LIMIT_MAX)] = VIOLATIONS_LIMIT,
) -> Response:
    """The audit of the whole stored log (every branch); ``head`` focuses the path checks.
    Lists the first ``violations_limit`` violations in log order; ``violations_total``,
    ``violation_counts`` and ``truncated`` count them all. Served from the process's audit of
    the conversation, extended by the events since, and its answer kept until the next."""
    answer = audit_cache(state.store).answer(
        state.store, conversation_id, head or None, violations_limit
    )
    return Response(answer, media_type="application/json")


MAX_TREE_EVENTS = 500
"""Events the tree carries in full (two per branch): beyond, the Canvas fetches what it shows."""


@router.get("/tree", response_model=TreeView)
def get_tree(conversation_id: str, state: State) -> TreeView:
    """Heads, branches (each with its length, base and parent branch) and branch points, in
    one request from the store's branch index (no scan of the log), with the events a view
    of the tree names: each branch's first event and head, and the stored head."""
    summary = state.store.branch_summary(conversation_id)
    wanted = [summary.head] if summary.head is not None else []
    wanted += [i for branch in summary.branches for i in (branch.head, branch.id)]
    events: dict[str, dict[str, Any]] = {}
    for event_id in dict.fromkeys(wanted):
        if len(events) >= MAX_TREE_EVENTS:
            break
        events[event_id] = event_to_dict(state.store.get_event(conversation_id, event_id).event)
    return TreeView.model_validate(
        {**dataclasses.asdict(summary), "events": events}, from_attributes=False
    )


@router.get("/events/{event_id}/children")
def get_children(conversation_id: str, event_id: str, state: State) -> list[dict[str, Any]]:
    """The children of one event, in seq order (read by their parent, from the index)."""
    state.store.get_event(conversation_id, event_id)  # 404 for an unknown event
    return [
        event_to_dict(stored.event) for stored in state.store.children(conversation_id, event_id)
    ]


@router.get("/transcript", response_model=TranscriptPage)
def get_transcript(
    conversation_id: str,
    state: State,
    head: str | None = None,
    before_seq: Annotated[int | None, Query(ge=SEQ_MIN, le=SEQ_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = TRANSCRIPT_PAGE,
) -> Response:
    """The newest ``limit`` transcript items (``api.transcript``, by ``events.view``'s rules)
    of the path root..``head`` (default: the head) whose first event's seq is below
    ``before_seq``; for older ones pass ``next_before_seq``. Costs a read of a bounded window
    of the path, not the whole path (``runtime.transcript``). Sent as the page serialises
    itself: its items are validated once, when made (FastAPI would dump and validate them
    again)."""
    page = transcript_page(state.store, conversation_id, head, before_seq, limit)
    return Response(page.model_dump_json(), media_type="application/json")


class _Sender:
    """Sends stored events' stream messages; counts events against the client's ``limit``.

    With ``batch`` (a client that understands it), events that are already waiting go out
    together as one JSON array per frame: a lagging socket catches up in few frames.
    """

    def __init__(self, websocket: WebSocket, limit: int | None, batch: bool) -> None:
        self.websocket = websocket
        self.remaining = limit
        self.batch = batch

    async def send(self, deliveries: list[Delivery]) -> bool:
        """False once ``limit`` events were sent (the server then closes the stream)."""
        if self.remaining is not None:
            deliveries = _first_stored(deliveries, self.remaining)
            self.remaining -= sum(1 for delivery in deliveries if delivery.seq is not None)
        texts = [text for delivery in deliveries for text in delivery.texts]
        if self.batch and len(texts) > 1:
            await self.websocket.send_text("[" + ",".join(texts) + "]")
        else:
            for text in texts:
                await self.websocket.send_text(text)
        return self.remaining is None or self.remaining > 0


def _first_stored(deliveries: list[Delivery], count: int) -> list[Delivery]:
    """``deliveries`` up to and including the ``count``-th stored one (transient ones are not
    counted by ``limit``)."""
    stored = 0
    for index, delivery in enumerate(deliveries):
        if delivery.seq is not None:
            stored += 1
            if stored == count:
                return deliveries[: index + 1]
    return deliveries


class StreamParams(BaseModel):
    """The stream's query parameters. Checked after the socket is accepted, so a bad one gets
    a close frame naming it (FastAPI would refuse the handshake with no reason)."""

    model_config = ConfigDict(extra="ignore")

    after_seq: Annotated[int, Field(ge=-1, le=MAX_SEQ)] = -1
    limit: Annotated[int, Field(ge=0, le=MAX_SEQ)] = 0
    """Close after this many events (0: no limit)."""
    batch: bool = False


BAD_PARAMS = 4400
"""Close code for bad query parameters (like HTTP 400; 4401, 4404, 4408 follow the same idea)."""
STORE_UNAVAILABLE = 1013
"""Close code "try again later": the store cannot be reached now (HTTP 503)."""
SERVER_ERROR = 1011
"""Close code for any other failure of the store or the server while streaming."""


@router.websocket("/events/stream")
async def stream_events(websocket: WebSocket, conversation_id: str) -> None:
    """Every stored event after ``after_seq``, then live ones: one ``event`` frame each, with
    its seq, resolved parent, the action it answers, and the status and head after it; a
    ``run_finished`` frame after a run's last event; transient frames (``"stored": false``)
    as they come (docs/stream.md). With ``limit`` the server closes the stream (code 1000)
    after that many events: resume with ``after_seq``. With ``batch=true`` a WebSocket
    message may hold a JSON array of frames instead of one frame.

    Close codes: 1000 limit reached; 4400 bad parameter (``after_seq`` is -1..2^63-1);
    4401 key needed; 4404 no such conversation; 4408 fell behind or the stream ended
    (reconnect with ``after_seq``); 1013 store unavailable (retry later); 1011 other failure."""
    state: ServerState = websocket.app.state.treadle
    await websocket.accept()
    if ws_key_required(state.security, dict(websocket.headers)) and not await _key_message_ok(
        websocket, state
    ):
        await websocket.close(code=4401, reason="a valid API key is required")
        return
    try:
        params = StreamParams.model_validate(dict(websocket.query_params))
    except ValidationError as error:
        await _close(websocket, BAD_PARAMS, _problem(error))
        return
    listener = Listener(loop=asyncio.get_running_loop())
    watcher = asyncio.create_task(_watch_disconnect(websocket, listener))
    try:
        delivered_up_to = await run_in_threadpool(state.hubs.join, conversation_id, listener)
        await _stream(websocket, state, conversation_id, params, listener, delivered_up_to)
    except WebSocketDisconnect:
        pass
    except ConversationNotFound:
        await _close(websocket, 4404, "no such conversation")
    except _STORE_FAILURES as error:  # at the join or during the replay
        await _close(websocket, *_store_failure(error))
    finally:
        # Also after a cancelled join: the join finishes in its thread first, then this runs.
        state.hubs.leave(listener)
        watcher.cancel()


async def _stream(
    websocket: WebSocket,
    state: ServerState,
    conversation_id: str,
    params: StreamParams,
    listener: Listener,
    delivered_up_to: int,
) -> None:
    sender = _Sender(websocket, params.limit or None, params.batch)
    replayed = await _replay(
        sender, listener, state, conversation_id, params.after_seq, delivered_up_to
    )
    if not replayed:
        await websocket.close(code=1000, reason="limit reached")
        return
    last = max(params.after_seq, delivered_up_to)
    while True:
        waiting = listener.with_transient(await _waiting_deliveries(listener, params.batch))
        if listener.disconnected:
            return
        # transient deliveries (no seq) go out as they come; stored ones only once
        fresh = [d for d in waiting if d is not None and (d.seq is None or d.seq > last)]
        if fresh:
            last = max([last, *(d.seq for d in fresh if d.seq is not None)])
            if not await sender.send(fresh):
                await websocket.close(code=1000, reason="limit reached")
                return
        if None in waiting:  # dropped for falling behind, or the stream ended
            failure = listener.hub.error if listener.hub is not None else None
            if failure is not None and not listener.dropped:
                await _close(websocket, *_store_failure(failure))
            else:
                await websocket.close(code=4408, reason="reconnect with after_seq")
            return


def _store_failure(error: Exception) -> tuple[int, str]:
    """The close code and reason for a failure of the store (or the hub following it)."""
    # The same outages as HTTP's 503 (a driver's own outage error a store let through, too).
    if isinstance(error, OUTAGES):
        return STORE_UNAVAILABLE, f"store unavailable, retry later: {error}"
    if isinstance(error, StoreError):
        return SERVER_ERROR, f"store error: {error}"
    return SERVER_ERROR, "the stream failed on the server"


def _problem(error: ValidationError) -> str:
    first = error.errors()[0]
    name = ".".join(str(part) for part in first["loc"]) or "query"
    if name in ("after_seq", "limit"):
        low = -1 if name == "after_seq" else 0
        return f"{name} must be an integer from {low} to 2^63-1, got {first.get('input')!r}"
    return f"{name}: {first['msg']}"


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    """Close with ``code``; the reason is cut to the 123 bytes a close frame can carry."""
    cut = reason.encode()[:123].decode(errors="ignore")
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # the client has gone
        await websocket.close(code=code, reason=cut)


async def _waiting_deliveries(listener: Listener, batch: bool) -> list[Delivery | None]:
    """The next delivery, and with ``batch`` every other one already queued (up to a page)."""
    waiting = [await listener.queue.get()]
    while batch and waiting[-1] is not None and len(waiting) < BATCH and not listener.queue.empty():
        waiting.append(listener.queue.get_nowait())
    return waiting


async def _watch_disconnect(websocket: WebSocket, listener: Listener) -> None:
    """The client sends nothing after its key: only a disconnect can come. Wake the sender
    loop when it does, or the handler would wait for the next event (and block shutdown)."""
    with contextlib.suppress(Exception):
        while (await websocket.receive())["type"] != "websocket.disconnect":
            pass
    listener.disconnected = True
    listener.queue.put_nowait(None)


async def _replay(
    sender: _Sender,
    listener: Listener,
    state: ServerState,
    conversation_id: str,
    after_seq: int,
    up_to: int,
) -> bool:
    """Stored events after ``after_seq`` up to ``up_to``; False once the limit is reached.
    Stops as soon as the client has gone (a long replay must not outlive it)."""
    start = max(after_seq + 1, 0)  # seqs start at 0: nothing is stored before
    if start > up_to:
        return True
    # The state as it stands at after_seq, so that replayed frames equal the live ones.
    frames = await run_in_threadpool(seeded_state, state.store, conversation_id, start - 1)
    while start <= up_to:
        if listener.disconnected:
            raise WebSocketDisconnect(1001)
        end = min(up_to + 1, start + REPLAY_PAGE)
        page = await run_in_threadpool(state.store.get_range, conversation_id, start, end)
        for first in range(0, len(page), BATCH if sender.batch else 1):
            chunk = page[first : first + (BATCH if sender.batch else 1)]
            if not await sender.send([Delivery.of(stored, frames) for stored in chunk]):
                return False
        start = end
    return True


async def _key_message_ok(websocket: WebSocket, state: ServerState) -> bool:
    with contextlib.suppress(Exception):
        first = await asyncio.wait_for(websocket.receive_json(), timeout=10)
        return isinstance(first, dict) and state.security.key_is_valid(first.get("api_key"))
    return False
