"""``/openhands/sockets/events/{id}``: the SDK's event socket.

After the handshake (and ``{"type": "auth", "session_api_key"}`` when the server has keys) the
client gets a ``full_state`` state update (its "ready"), then every event stored from then on,
bare, as SDK JSON, with an ``execution_status`` update after each status change, and a
``full_state`` again when a run an SDK client started ends (without it the client's ``run()``
never returns while the conversation waits or is paused), after every event stored before it
(the client's callbacks have seen the whole run when its ``run()`` returns). Close codes: 4001 bad key, 4004
unknown conversation (the only two the client gives up on); 1011 when the server cannot go
on (the client reconnects and catches up through REST).

Only the end of the whole operation sends ``full_state``, not each status change: an SDK
``run`` that accepts waiting calls passes through ``idle`` before the agent goes on, and the
client would take that for the end. The client counts a ``full_state`` as the end of its run
only if it arrives after its ``/run`` call returned; a run quicker than that would leave it
polling. So while a client polls the conversation (GET, as its wait loop does) and nothing
runs, its sockets get ``full_state`` again (``nudges``): the wait ends within one poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.concurrency import run_in_threadpool

from treadle.data.status import status_from_event
from treadle.events.model import StateChangeEvent
from treadle.runtime.status import ConversationStatus, read_status
from treadle.server.openhands.events import sdk_json, state_update
from treadle.server.openhands.info import conversation_info
from treadle.server.openhands.nudges import NUDGE, RUN_ENDED, Nudges
from treadle.server.openhands.requests import conversation_uuid
from treadle.server.state import ServerState
from treadle.server.stream import TRANSIENT_READY, Listener
from treadle.store.base import ConversationNotFound

logger = logging.getLogger(__name__)
router = APIRouter(tags=["OpenHands SDK"])

FULL_STATE = "full_state"
STATUS = "execution_status"
AUTH_TIMEOUT_S = 10.0
READ_PAGE = 200


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    cut = reason.encode()[:123].decode(errors="ignore")
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        await websocket.close(code=code, reason=cut)


async def _authenticated(websocket: WebSocket, state: ServerState) -> bool:
    security = state.security
    if not security.api_keys:
        return True
    presented = websocket.headers.get("x-session-api-key") or websocket.query_params.get(
        "session_api_key"
    )
    if presented is not None:
        return security.key_is_valid(presented)
    with contextlib.suppress(Exception):
        first = await asyncio.wait_for(websocket.receive_json(), timeout=AUTH_TIMEOUT_S)
        return (
            isinstance(first, dict)
            and first.get("type") == "auth"
            and isinstance(first.get("session_api_key"), str)
            and security.key_is_valid(first["session_api_key"])
        )
    return False


async def _watch_disconnect(websocket: WebSocket, listener: Listener) -> None:
    """Whatever the client sends after its key is read and dropped; a disconnect wakes the
    sender loop."""
    with contextlib.suppress(Exception):
        while (await websocket.receive())["type"] != "websocket.disconnect":
            pass
    listener.disconnected = True
    listener.queue.put_nowait(None)


def full_state_text(state: ServerState, conversation_id: str) -> str:
    info = state.store.get_conversation(conversation_id)
    return state_update(FULL_STATE, conversation_info(state, info))


@router.websocket("/sockets/events/{conversation_id}")
async def events_socket(websocket: WebSocket, conversation_id: str) -> None:
    state: ServerState = websocket.app.state.treadle
    nudges = websocket.app.state.openhands.nudges
    await websocket.accept()
    if not await _authenticated(websocket, state):
        await _close(websocket, 4001, "a valid session API key is required")
        return
    try:
        canonical = conversation_uuid(conversation_id)
        await run_in_threadpool(state.store.get_conversation, canonical)
    except Exception:  # not a UUID, or no such conversation
        await _close(websocket, 4004, "no such conversation")
        return
    listener = Listener(loop=asyncio.get_running_loop())
    watcher = asyncio.create_task(_watch_disconnect(websocket, listener))
    try:
        cursor = await run_in_threadpool(state.hubs.join, canonical, listener)
        nudges.add(canonical, listener)
        await _follow(websocket, state, nudges, canonical, listener, cursor)
    except (WebSocketDisconnect, RuntimeError):
        pass  # the client has gone
    except ConversationNotFound:
        await _close(websocket, 4004, "the conversation was deleted")
    except Exception as error:  # the store failed: the client reconnects and catches up
        logger.exception("OpenHands socket of %s failed", canonical)
        await _close(websocket, 1011, f"the server cannot go on: {type(error).__name__}")
    finally:
        nudges.remove(canonical, listener)
        watcher.cancel()
        state.hubs.leave(listener)


async def _follow(
    websocket: WebSocket,
    state: ServerState,
    nudges: Nudges,
    conversation_id: str,
    listener: Listener,
    cursor: int,
) -> None:
    # The status where the live events start: each change after it is told.
    status, _reason = await run_in_threadpool(read_status, state.store, conversation_id, cursor + 1)
    sent = _Sent(cursor, status)
    await websocket.send_text(await run_in_threadpool(full_state_text, state, conversation_id))
    while True:
        item = await listener.queue.get()
        if item is None:
            if listener.disconnected:
                return
            gone = await run_in_threadpool(_deleted, state, conversation_id)
            if gone:
                await _close(websocket, 4004, "the conversation was deleted")
            else:
                await _close(websocket, 1011, "the stream ended; reconnect")
            return
        if item is NUDGE or item is RUN_ENDED:
            unless_held = item is NUDGE
            if unless_held and not nudges.awaited(conversation_id):
                continue  # the client changed the conversation since: it waits no more
            # Every event stored so far goes first, as the SDK's server flushes them before
            # its full_state: the client's callbacks have seen the whole run when it returns.
            last = await run_in_threadpool(_last_seq, state, conversation_id)
            await _send_events(websocket, state, conversation_id, sent, last)
            text = await run_in_threadpool(_nudged_state, state, conversation_id, unless_held)
            if text is not None:
                await websocket.send_text(text)
            continue
        if item is TRANSIENT_READY:  # live output of a call in progress: the SDK has no frame
            listener.with_transient([item])
            continue
        if item.seq is None:  # a state update of ours (Nudges.say)
            for text in item.texts:
                await websocket.send_text(text)
            continue
        await _send_events(websocket, state, conversation_id, sent, item.seq)


@dataclass
class _Sent:
    """How far a socket has told the log: the last seq sent, and the status it last told."""

    cursor: int
    status: ConversationStatus


async def _send_events(
    websocket: WebSocket, state: ServerState, conversation_id: str, sent: _Sent, up_to: int
) -> None:
    """Send the stored events after ``sent.cursor`` up to seq ``up_to``, bare, with an
    ``execution_status`` update after each status change."""
    while sent.cursor < up_to:
        end = min(up_to + 1, sent.cursor + 1 + READ_PAGE)
        page = await run_in_threadpool(state.store.get_range, conversation_id, sent.cursor + 1, end)
        if not page:
            return
        for stored in page:
            await websocket.send_json(sdk_json(stored))
            event = stored.event
            found = status_from_event(event) if isinstance(event, StateChangeEvent) else None
            if found is not None and found[0] is not sent.status:
                sent.status = found[0]
                await websocket.send_text(state_update(STATUS, sent.status.value))
        sent.cursor = page[-1].seq


def _last_seq(state: ServerState, conversation_id: str) -> int:
    return state.store.event_count(conversation_id) - 1


def _deleted(state: ServerState, conversation_id: str) -> bool:
    try:
        state.store.get_conversation(conversation_id)
    except ConversationNotFound:
        return True
    return False


def _nudged_state(state: ServerState, conversation_id: str, unless_held: bool) -> str | None:
    """``full_state``; None when ``unless_held`` and a run holds the conversation (its end
    will say)."""
    if unless_held and state.runs.leases.is_held(conversation_id):
        return None
    return full_state_text(state, conversation_id)
