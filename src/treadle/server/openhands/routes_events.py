"""``/openhands/api/conversations/{id}/events``: search the log as SDK events, send a user
message (optionally running), and answer the calls waiting for confirmation."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from treadle.runtime.errors import ConversationBusy, NothingPending, NotRunnable, NotWaiting
from treadle.server.errors import ApiError
from treadle.server.openhands.context import OpenHands, OpenHandsState, State
from treadle.server.openhands.events import MAX_PAGE, sdk_json, search_page
from treadle.server.openhands.requests import json_object, stored, when_free
from treadle.server.openhands.routes_conversations import SUCCESS, TITLE_MAX_CHARS, start_run
from treadle.server.state import ServerState
from treadle.store.base import EventNotFound

router = APIRouter(prefix="/api/conversations/{conversation_id}/events", tags=["OpenHands SDK"])

MESSAGE_MAX_CHARS = 1_000_000
TITLE_CHARS = 50
"""A title made from the first message: its first line, this long at most (the SDK's
``generate_title`` default length)."""


@router.get("/search")
def search_events(
    conversation_id: str,
    state: State,
    page_id: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(gt=0, le=MAX_PAGE)] = MAX_PAGE,
    kind: Annotated[str | None, Query(max_length=100)] = None,
    source: Annotated[str | None, Query(max_length=40)] = None,
    body: Annotated[str | None, Query(max_length=1000)] = None,
    sort_order: Annotated[str, Query(pattern="^(TIMESTAMP|TIMESTAMP_DESC)$")] = "TIMESTAMP",
) -> JSONResponse:
    """A page of the log (every branch, in the order it was written) as SDK events."""
    info = stored(state, conversation_id)
    # Sent as made (JSON already): FastAPI's own encoding of a page costs more than the page.
    page = search_page(
        state.store,
        info.id,
        page_id=page_id,
        limit=limit,
        kind=kind,
        source=source,
        body=body,
        descending=sort_order == "TIMESTAMP_DESC",
    )
    return JSONResponse(page)


@router.get("/count")
def count_events(conversation_id: str, state: State) -> int:
    return stored(state, conversation_id).event_count


@router.get("/{event_id}")
def get_event(conversation_id: str, event_id: str, state: State) -> dict[str, Any]:
    info = stored(state, conversation_id)
    try:
        return sdk_json(state.store.get_event(info.id, event_id[:200]))
    except EventNotFound:
        raise ApiError(404, "not_found", f"no event {event_id[:80]!r} in {info.id}") from None


def _message_text(body: dict[str, Any]) -> str:
    if body.get("role", "user") != "user":
        raise ApiError(422, "bad_request", "only user messages can be sent (role: user)")
    content = body.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise ApiError(422, "bad_request", 'content must be a list of {"type": "text", "text"}')
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type", "text") != "text":
            raise ApiError(
                422, "openhands_unsupported", "only text content is taken (no images here)"
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise ApiError(422, "bad_request", "a text part needs its text")
        texts.append(text)
    text = "\n".join(texts)
    if not text.strip() or len(text) > MESSAGE_MAX_CHARS or "\0" in text:
        raise ApiError(
            422, "bad_request", f"the message must be 1 to {MESSAGE_MAX_CHARS} characters, no NUL"
        )
    return text


def _title_from(text: str) -> str:
    line = text.strip().splitlines()[0].strip()
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 3].rstrip() + "..."


def _send(
    state: ServerState, extra: OpenHandsState, conversation_id: str, body: dict[str, Any]
) -> None:
    text = _message_text(body)
    run = body.get("run", False)
    if not isinstance(run, bool):
        raise ApiError(422, "bad_request", "run must be true or false")
    with extra.changing(conversation_id):
        try:
            state.runs.send_message(conversation_id, text)
        except NotRunnable as error:  # its client's key is missing: say so, not a 409
            raise ApiError(400, "not_runnable", str(error)) from None
        info = state.store.get_conversation(conversation_id)
        if info.title is None:  # the SDK's title, without a model call
            title = _title_from(text)[:TITLE_MAX_CHARS]
            state.store.update_conversation(conversation_id, title=title)
        if run:
            start_run(state, extra, conversation_id)  # already running: it reads the message


@router.post("")
async def send_message(
    conversation_id: str, request: Request, state: State, extra: OpenHands
) -> dict[str, bool]:
    """``{"role": "user", "content": [{"type": "text", "text"}], "run": false}``; while a run
    holds the conversation, the message is queued for it (stored after the calls in flight)."""
    body = await json_object(request)
    info = stored(state, conversation_id)
    await run_in_threadpool(_send, state, extra, info.id, body)
    return SUCCESS


def _respond(
    state: ServerState, extra: OpenHandsState, conversation_id: str, body: dict[str, Any]
) -> None:
    accept = body.get("accept")
    reason = body.get("reason", "User rejected the action.")
    if not isinstance(accept, bool):
        raise ApiError(422, "bad_request", "accept must be true or false")
    if not isinstance(reason, str) or len(reason) > 10_000:
        raise ApiError(422, "bad_request", "reason must be a string of at most 10000 characters")
    with extra.changing(conversation_id):
        if accept:
            start_run(state, extra, conversation_id)  # already running: it runs them (as the SDK's)
            return

        def reject() -> None:
            with state.runs.exclusive(conversation_id, "reject"):
                conversation = state.runtime(conversation_id)
                conversation.check_pending(None)
                conversation.reject(None, reason=reason)

        try:
            when_free(state, conversation_id, reject)  # a run just ending lets go first
        except (ConversationBusy, NothingPending, NotWaiting):
            # Another request accepted them first (they run now), or none waits: as the
            # OpenHands server, a reject of nothing pending changes nothing.
            return


@router.post("/respond_to_confirmation")
async def respond_to_confirmation(
    conversation_id: str, request: Request, state: State, extra: OpenHands
) -> dict[str, bool]:
    """``{"accept": bool, "reason"}``: accept runs every waiting call and goes on; reject
    answers each with a user rejection. Racing requests are served one after the other."""
    body = await json_object(request)
    info = stored(state, conversation_id)
    await run_in_threadpool(_respond, state, extra, info.id, body)
    return SUCCESS
