"""``/openhands/api/conversations``: create, read, rename, delete, and the user's intents (run,
pause, interrupt, confirmation policy, secrets), with the SDK's meaning, over Treadle's own
conversations (the same ones ``/api/conversations`` shows)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from treadle.data.ids import new_id
from treadle.data.settings import SETTINGS_KEY, ConversationSettings
from treadle.runtime.conversation import Conversation
from treadle.runtime.errors import ConversationBusy, NotRunnable, TooManyRunning
from treadle.server.errors import ApiError
from treadle.server.openhands.agent_spec import (
    check_unsupported,
    confirmation_json,
    confirmation_of,
    max_iterations_of,
    model_of,
    settings_from_request,
    shown_agent,
)
from treadle.server.openhands.context import OpenHands, OpenHandsState, State
from treadle.server.openhands.events import state_update
from treadle.server.openhands.info import conversation_info, openhands_facts, settings_of
from treadle.server.openhands.keys import (
    KEY_MARK,
    KEY_SECRET_NAMES,
    MAX_KEY_CHARS,
    META_KEY,
    ClientKey,
    keyed_policy,
)
from treadle.server.openhands.nudges import RUN_ENDED
from treadle.server.openhands.requests import (
    conversation_uuid,
    json_object,
    stored,
    when_free,
)
from treadle.server.runs import Operation
from treadle.server.state import ServerState
from treadle.server.workers.routing import check_here
from treadle.store.base import ConversationExists, ConversationNotFound, EventNotFound
from treadle.store.checks import InvalidConversationId

router = APIRouter(prefix="/api/conversations", tags=["OpenHands SDK"])

SUCCESS = {"success": True}
TITLE_MAX_CHARS = 200
WAITING = "waiting_for_confirmation"


# -- create ---------------------------------------------------------------------------------


def _working_dir(request: dict[str, Any]) -> str:
    workspace = request.get("workspace")
    if not isinstance(workspace, dict):
        raise ApiError(422, "bad_request", 'workspace must be {"kind": "LocalWorkspace", ...}')
    if workspace.get("kind", "LocalWorkspace") != "LocalWorkspace":
        raise ApiError(
            422, "openhands_unsupported", "only a LocalWorkspace (a folder here) is supported"
        )
    working_dir = workspace.get("working_dir")
    if not isinstance(working_dir, str):
        raise ApiError(422, "bad_request", "workspace.working_dir must be a folder path")
    return working_dir  # resolved (inside the root) and made by check_workspace


def _remember_key(
    extra: OpenHandsState, state: ServerState, conversation_id: str, key: str | None, base: Any
) -> None:
    if key is None:
        return
    extra.keys.set(conversation_id, key, base if isinstance(base, str) else None)
    if not state.runs.is_running(conversation_id):
        state.runs.forget(conversation_id)  # reopened with the key at its next use


def _create(
    extra: OpenHandsState, state: ServerState, request: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    check_unsupported(request)
    agent = request.get("agent")
    if not isinstance(agent, dict):
        raise ApiError(422, "bad_request", "agent (an SDK agent spec) is required")
    model, key = model_of(agent)
    wanted = request.get("conversation_id")
    if wanted is not None:
        conversation_id = conversation_uuid(wanted)
        check_here(conversation_id)  # its key must live in its worker (--workers N)
        try:
            existing = state.store.get_conversation(conversation_id)
        except ConversationNotFound:
            pass
        else:  # idempotent, as the OpenHands server: the stored one (200)
            _remember_key(extra, state, conversation_id, key, model.base_url)
            return conversation_info(state, existing), 200
    else:
        conversation_id = new_id()  # routed back to this worker
    settings: ConversationSettings = settings_from_request(request, _working_dir(request))
    settings = state.check_workspace(settings)
    facts = {
        "agent": shown_agent(agent, key is not None),
        "max_iterations": max_iterations_of(request),
        KEY_MARK: key is not None,
        "tags": request.get("tags") if isinstance(request.get("tags"), dict) else {},
    }
    policy = state.policy
    if key is not None:
        policy = keyed_policy(policy, ClientKey(key, model.base_url))
    # Stored with its OpenHands facts in one write, then opened as a run would open it: a
    # conversation that cannot be built here is removed again, its error the answer.
    metadata = {SETTINGS_KEY: settings.to_metadata(), META_KEY: facts}
    try:
        info = state.store.create_conversation(conversation_id, metadata=metadata)
    except ConversationExists:
        return conversation_info(state, state.store.get_conversation(conversation_id)), 200
    except InvalidConversationId as error:
        raise ApiError(422, "bad_conversation_id", str(error)) from None
    try:
        Conversation.open(state.store, conversation_id, policy=policy).close()
    except BaseException:
        state.store.delete_conversation(conversation_id)
        raise
    if key is not None:
        extra.keys.set(conversation_id, key, model.base_url)
    return conversation_info(state, info, status="idle"), 201


@router.post("")
async def start_conversation(request: Request, state: State, extra: OpenHands) -> Response:
    """An SDK ``StartConversationRequest``; 201 with its ``ConversationInfo`` (200 for an
    existing ``conversation_id``)."""
    body = await json_object(request)
    info, status = await run_in_threadpool(_create, extra, state, body)
    return JSONResponse(info, status_code=status)


# -- read, rename, delete -------------------------------------------------------------------


@router.get("/{conversation_id}")
def get_conversation(conversation_id: str, state: State, extra: OpenHands) -> dict[str, Any]:
    info = conversation_info(state, stored(state, conversation_id))
    if info["execution_status"] != "running":
        # A client polling for the end of its run gets it over its socket (routes_socket).
        extra.nudges.nudge(info["id"])
    return info


@router.get("")
def batch_get(
    state: State, ids: Annotated[list[str] | None, Query(max_length=100)] = None
) -> list[dict[str, Any] | None]:
    """``?ids=A&ids=B``: each conversation's info, or null."""
    found: list[dict[str, Any] | None] = []
    for conversation_id in (ids or [])[:100]:
        try:
            found.append(conversation_info(state, stored(state, conversation_id)))
        except ApiError:
            found.append(None)
    return found


@router.patch("/{conversation_id}")
async def update_conversation(
    conversation_id: str, request: Request, state: State
) -> dict[str, bool]:
    """``{"title"}``: the title, set as given (no model call)."""
    body = await json_object(request)
    info = stored(state, conversation_id)
    title = body.get("title")
    if title is not None:
        if not isinstance(title, str) or not title.strip() or len(title) > TITLE_MAX_CHARS:
            raise ApiError(
                422, "bad_title", f"title must be a non-empty string of at most {TITLE_MAX_CHARS}"
            )
        await run_in_threadpool(state.store.update_conversation, info.id, title=title)
    return SUCCESS


def _delete(state: ServerState, extra: OpenHandsState, conversation_id: str) -> None:
    with state.runs.exclusive(conversation_id, "pause it before deleting it"):
        state.runs.forget(conversation_id)
        state.store.delete_conversation(conversation_id)
    extra.keys.drop(conversation_id)


@router.delete("/{conversation_id}")
def delete_conversation(conversation_id: str, state: State, extra: OpenHands) -> dict[str, bool]:
    """Deleted with its log (409 while it runs: pause it first)."""
    info = stored(state, conversation_id)
    with extra.changing(info.id):
        when_free(state, info.id, lambda: _delete(state, extra, info.id))
    return SUCCESS


# -- run, pause, interrupt ------------------------------------------------------------------


def _max_steps(state: ServerState, conversation_id: str) -> int:
    facts = openhands_facts(state.store.get_conversation(conversation_id))
    value = facts.get("max_iterations")
    return value if isinstance(value, int) and value > 0 else 500


def _run_and_accept(max_steps: int, ended: Callable[[], None]) -> Operation:
    """The operation of an SDK ``run``: the calls waiting for confirmation are accepted (the
    SDK's ``run`` means so), then the agent goes on; ``ended`` is told when it is over."""

    def operation(conversation: Conversation) -> object:
        try:
            if conversation.pending_actions() and conversation.status.value == WAITING:
                status = conversation.confirm()
                if status.value in (WAITING, "paused", "error", "stuck", "finished"):
                    return status
            return conversation.run(max_steps)
        finally:
            ended()

    return operation


def start_run(state: ServerState, extra: OpenHandsState, conversation_id: str) -> bool:
    """Start the SDK's run; False when it already runs (here or in another server)."""
    max_steps = _max_steps(state, conversation_id)
    operation = _run_and_accept(max_steps, lambda: extra.nudges.nudge(conversation_id, RUN_ENDED))
    try:
        when_free(
            state,
            conversation_id,
            lambda: state.runs.start(conversation_id, operation, "openhands-run"),
        )
        extra.nudges.run_started(conversation_id)
    except ConversationBusy:
        extra.nudges.run_started(conversation_id)  # the client waits for the run's end
        return False
    except NotRunnable as error:
        # Not a 409: the SDK takes a 409 from /run as "already running" and waits for ever.
        raise ApiError(400, "not_runnable", str(error)) from None
    except TooManyRunning as error:
        raise ApiError(429, "too_many_running", str(error)) from None
    return True


@router.post("/{conversation_id}/run")
def run(conversation_id: str, state: State, extra: OpenHands, response: Response) -> dict[str, Any]:
    """Run in the background (accepting every call waiting for confirmation); 409 when it
    already runs, which the SDK's client takes as "wait for it"."""
    info = stored(state, conversation_id)
    with extra.changing(info.id):
        if not start_run(state, extra, info.id):
            raise ApiError(409, "conflict", "Conversation already running. Wait for completion.")
    return SUCCESS


@router.post("/{conversation_id}/pause")
def pause(conversation_id: str, state: State, extra: OpenHands) -> dict[str, bool]:
    info = stored(state, conversation_id)
    with extra.changing(info.id):
        _refusing_unopenable(lambda: state.runs.pause(info.id, "pause"))
    return SUCCESS


@router.post("/{conversation_id}/interrupt")
def interrupt(conversation_id: str, state: State, extra: OpenHands) -> dict[str, bool]:
    info = stored(state, conversation_id)
    with extra.changing(info.id):
        _refusing_unopenable(lambda: state.runs.interrupt(info.id))
    return SUCCESS


def _refusing_unopenable(action: Callable[[], object]) -> None:
    try:
        action()
    except NotRunnable as error:
        raise ApiError(400, "not_runnable", str(error)) from None


# -- settings: confirmation policy, secrets ---------------------------------------------------


def _set_confirmation(state: ServerState, conversation_id: str, policy: Any) -> None:
    wanted = confirmation_of(policy)
    with state.runs.exclusive(conversation_id, "pause it before changing its confirmation"):
        info = state.store.get_conversation(conversation_id)
        settings = settings_of(info)
        if settings is None:
            raise ApiError(409, "no_settings", "the conversation has no runtime settings")
        if settings.confirmation is wanted:
            return
        changed = settings.model_copy(update={"confirmation": wanted})
        state.store.update_conversation(
            conversation_id, metadata={**info.metadata, "settings": changed.to_metadata()}
        )
        state.runs.forget(conversation_id)  # reopened with the new policy


@router.post("/{conversation_id}/confirmation_policy")
async def set_confirmation_policy(
    conversation_id: str, request: Request, state: State, extra: OpenHands
) -> dict[str, bool]:
    """``{"policy": {"kind": "AlwaysConfirm" | "NeverConfirm" | "ConfirmRisky"}}``, stored in
    the conversation's settings (409 while it runs)."""
    body = await json_object(request)
    info = stored(state, conversation_id)

    def change() -> None:
        with extra.changing(info.id):
            when_free(state, info.id, lambda: _set_confirmation(state, info.id, body.get("policy")))
        policy = confirmation_json(confirmation_of(body.get("policy")))
        extra.nudges.say(info.id, state_update("confirmation_policy", policy))

    await run_in_threadpool(change)
    return SUCCESS


@router.post("/{conversation_id}/secrets")
async def update_secrets(
    conversation_id: str, request: Request, state: State, extra: OpenHands
) -> dict[str, bool]:
    """``{"secrets": {"LLM_API_KEY": "..."}}``: the conversation's model key (memory only).
    Other secrets are refused: Treadle exports secrets to tools only from its own settings."""
    body = await json_object(request)
    info = stored(state, conversation_id)
    secrets = body.get("secrets")
    if not isinstance(secrets, dict) or not secrets:
        raise ApiError(422, "bad_request", 'send {"secrets": {"LLM_API_KEY": "..."}}')
    others = [name for name in secrets if name not in KEY_SECRET_NAMES]
    if others:
        raise ApiError(
            422,
            "openhands_unsupported",
            f"secret(s) {', '.join(repr(str(n)[:40]) for n in others[:5])} are not taken here: "
            "this server takes only the model key (LLM_API_KEY), held in memory",
        )
    key = next(secrets[name] for name in KEY_SECRET_NAMES if name in secrets)
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or "\0" in key:
        raise ApiError(422, "bad_request", "LLM_API_KEY must be a non-empty string")
    facts = openhands_facts(info)
    base = ((facts.get("agent") or {}).get("llm") or {}).get("base_url")
    await run_in_threadpool(_remember_key, extra, state, info.id, key, base)
    if not facts.get(KEY_MARK):
        merged = {**facts, KEY_MARK: True}
        await run_in_threadpool(
            lambda: state.store.update_conversation(
                info.id, metadata={**info.metadata, META_KEY: merged}
            )
        )
    return SUCCESS


# -- what Treadle does not do the SDK's way ---------------------------------------------------


@router.post("/{conversation_id}/condense")
def condense(conversation_id: str, state: State) -> Response:
    stored(state, conversation_id)
    raise ApiError(
        409,
        "condense_unsupported",
        "Treadle condenses by itself when the context would pass its token budget (settings "
        "condense: auto); a forced condensation is not offered",
    )


@router.post("/{conversation_id}/ask_agent")
def ask_agent(conversation_id: str, state: State) -> Response:
    stored(state, conversation_id)
    raise ApiError(
        501,
        "ask_agent_unsupported",
        "ask_agent is not offered: every model call of a Treadle conversation is recorded in "
        "its log; send a message instead",
    )


# -- branches: fork and navigate -------------------------------------------------------------


def _event_id(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ApiError(422, "bad_request", f"{what} must be an event id")
    return value


def _fork(
    state: ServerState, extra: OpenHandsState, conversation_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    if body.get("id") is not None:
        raise ApiError(
            422, "openhands_unsupported", "a fork's id is chosen by this server: omit id"
        )
    title = body.get("title")
    if title is not None and (not isinstance(title, str) or len(title) > TITLE_MAX_CHARS):
        raise ApiError(422, "bad_title", f"title must be a string of at most {TITLE_MAX_CHARS}")
    event_id = _event_id(body.get("from_event_id"), "from_event_id")
    if event_id is not None:
        try:
            state.store.get_event(conversation_id, event_id)
        except EventNotFound:
            raise ApiError(404, "not_found", f"no event {event_id[:80]!r} to fork from") from None
    try:
        child = state.runtime(conversation_id).fork(event_id, title=title)
    except NotRunnable as error:
        raise ApiError(400, "not_runnable", str(error)) from None
    parent_key = extra.keys.get(conversation_id)
    if parent_key is not None:  # the fork runs with its parent's key (memory only, too)
        extra.keys.set(child.id, parent_key.key, parent_key.base_url)
    return conversation_info(state, state.store.get_conversation(child.id))


@router.post("/{conversation_id}/fork")
async def fork(
    conversation_id: str, request: Request, state: State, extra: OpenHands
) -> JSONResponse:
    """Treadle's fork: a new conversation holding the path up to ``from_event_id`` (default:
    the head) and its snapshots, sharing the workspace; 201 with its info."""
    body = await json_object(request, optional=True)
    info = stored(state, conversation_id)
    child = await run_in_threadpool(_fork, state, extra, info.id, body)
    return JSONResponse(child, status_code=201)


def _navigate(state: ServerState, conversation_id: str, body: dict[str, Any]) -> dict[str, Any]:
    event_id = _event_id(body.get("event_id"), "event_id")
    if event_id is None:
        raise ApiError(
            422, "openhands_unsupported", "a Treadle head is an event: give event_id (not null)"
        )
    try:
        state.store.get_event(conversation_id, event_id)
    except EventNotFound:
        raise ApiError(404, "not_found", f"no event {event_id[:80]!r} here") from None
    with state.runs.exclusive(conversation_id, "pause it before switching branch"):
        try:
            state.runtime(conversation_id).switch_branch(event_id)
        except NotRunnable as error:
            raise ApiError(400, "not_runnable", str(error)) from None
    return conversation_info(state, state.store.get_conversation(conversation_id))


@router.post("/{conversation_id}/navigate")
async def navigate(conversation_id: str, request: Request, state: State) -> dict[str, Any]:
    """Treadle's switch branch: the head moves to ``event_id`` (the model's context follows);
    409 while it runs."""
    body = await json_object(request)
    info = stored(state, conversation_id)
    return await run_in_threadpool(
        when_free, state, info.id, lambda: _navigate(state, info.id, body)
    )
