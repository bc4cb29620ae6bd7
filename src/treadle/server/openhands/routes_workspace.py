"""``/openhands/api/bash/*`` and ``/openhands/api/file/*``: what the SDK's ``RemoteWorkspace``
calls, with absolute paths and no conversation id.

The OpenHands server's routes act anywhere on its host; these never do. A path (or a
command's working directory) must lie inside the workspace of a stored conversation (by real
path, symlinks followed: ``LocalWorkspace.resolve``), and the command runs in that
conversation's sandbox with its secrets masked. Anything else is refused: 403 outside every
workspace, 400 for a path that is not absolute, 404 for a missing file, 413 for a file larger
than the server takes. When several conversations share a folder, the one updated last is
used.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from treadle.runtime.conversation import Conversation
from treadle.runtime.errors import NotRunnable
from treadle.runtime.workspace.base import WorkspacePathError
from treadle.server.errors import ApiError
from treadle.server.openhands.bash_events import BashEventsQuery
from treadle.server.openhands.commands import MAX_TIMEOUT_S, TooManyCommands
from treadle.server.openhands.context import OpenHands, State
from treadle.server.openhands.info import settings_of
from treadle.server.openhands.requests import json_object
from treadle.server.state import ServerState
from treadle.server.workers.routing import check_here

router = APIRouter(prefix="/api", tags=["OpenHands SDK workspace"])

PATH_MAX_CHARS = 4096
MAX_DOWNLOAD_BYTES = 64 * 1024 * 1024
COMMAND_MAX_CHARS = 100_000
SCAN_LIMIT = 10_000
"""Conversations looked at to find the workspace holding a path (newest first)."""


def _absolute(path: Any, what: str) -> str:
    if not isinstance(path, str) or not path or len(path) > PATH_MAX_CHARS or "\0" in path:
        raise ApiError(400, "bad_path", f"{what} must be an absolute path of at most 4096 chars")
    if not path.startswith("/"):
        raise ApiError(400, "bad_path", f"{what} {path[:80]!r} is not absolute: give the full path")
    return path


def _lexically_inside(path: str, root: str) -> bool:
    normal = os.path.normpath(path)
    return normal == root or normal.startswith(root.rstrip("/") + "/")


def owner_of(state: ServerState, path: str) -> tuple[Conversation, Path]:
    """The conversation whose workspace holds ``path``, and the path resolved in it (403 when
    none does; 400 when its conversation cannot be opened here, naming why)."""
    candidates = []
    offset = 0
    while offset < SCAN_LIMIT:
        page = state.store.list_conversations(limit=500, offset=offset)
        for info in page:
            settings = settings_of(info)
            if settings is not None and _lexically_inside(path, settings.workspace):
                candidates.append(info)
        if len(page) < 500:
            break
        offset += 500
    candidates.sort(key=lambda info: info.updated_at, reverse=True)
    refusal = None
    for info in candidates:
        check_here(info.id)  # its sandbox and key live in its worker (--workers N)
        try:
            conversation = state.runtime(info.id)
        except NotRunnable as error:
            refusal = str(error)
            continue
        try:
            return conversation, conversation.workspace.resolve(path)
        except WorkspacePathError as error:  # a symlink inside leads out
            refusal = str(error)
    if refusal is not None:
        raise ApiError(403, "outside_workspace", refusal)
    raise ApiError(
        403,
        "outside_workspace",
        f"{path[:120]!r} is not inside the workspace of any conversation here: this server "
        "acts only inside conversations' workspaces (create one whose working_dir holds it)",
    )


# -- bash -----------------------------------------------------------------------------------


@router.post("/bash/start_bash_command")
async def start_bash_command(request: Request, state: State, extra: OpenHands) -> dict[str, Any]:
    """``{"command", "cwd", "timeout"}``: started in the background; its output comes from
    ``bash_events/search``."""
    body = await json_object(request)
    command = body.get("command")
    if not isinstance(command, str) or not command.strip() or len(command) > COMMAND_MAX_CHARS:
        raise ApiError(400, "bad_command", "command must be a non-empty string")
    if "\0" in command:
        raise ApiError(400, "bad_command", "command must not contain NUL")
    if body.get("cwd") is None:
        raise ApiError(
            400,
            "cwd_required",
            "give cwd (a folder inside a conversation's workspace): this server runs commands "
            "only in a conversation's workspace and sandbox",
        )
    cwd = _absolute(body.get("cwd"), "cwd")
    timeout = body.get("timeout", 300)
    if (
        not isinstance(timeout, int)
        or isinstance(timeout, bool)
        or not 1 <= timeout <= MAX_TIMEOUT_S
    ):
        raise ApiError(400, "bad_timeout", f"timeout must be 1 to {MAX_TIMEOUT_S} seconds")

    def start() -> dict[str, Any]:
        conversation, resolved = owner_of(state, cwd)
        if not resolved.is_dir():
            raise ApiError(400, "bad_cwd", f"cwd {cwd[:120]!r} is not a folder")
        try:
            record = extra.commands.start(
                command, resolved, timeout, conversation.workspace, conversation.secrets.mask
            )
        except TooManyCommands as error:
            raise ApiError(429, "too_many_commands", str(error)) from None
        return record.as_json()

    return await run_in_threadpool(start)


@router.get("/bash/bash_events/search")
def search_bash_events(
    extra: OpenHands, query: Annotated[BashEventsQuery, Query()]
) -> dict[str, Any]:
    """Events of the commands started here (``BashCommand``, ``BashOutput``). With --workers N
    a listing without ``command_id__eq`` is the front's, over every worker's commands."""
    return query.page(extra.commands.events())


@router.post("/bash/bash_commands/{command_id}/stop")
def stop_bash_command(command_id: str, extra: OpenHands) -> dict[str, bool]:
    if not extra.commands.stop(command_id[:64]):
        raise ApiError(404, "not_found", "no such command here")
    return {"success": True}


# -- files ----------------------------------------------------------------------------------


def _write(state: ServerState, path: str, data: bytes) -> int:
    _conversation, resolved = owner_of(state, path)
    try:
        found = os.lstat(resolved)
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise ApiError(400, "not_a_file", f"{path[:120]!r} exists and is not a regular file")
    resolved.parent.mkdir(parents=True, exist_ok=True)
    # Written beside it, then renamed: a reader never sees half a file, and a link put
    # there meanwhile is replaced, never followed.
    handle, temporary = tempfile.mkstemp(dir=resolved.parent, prefix=".treadle-upload-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, resolved)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return len(data)


@router.post("/file/upload")
async def upload_file(
    request: Request, state: State, path: Annotated[str, Query(max_length=PATH_MAX_CHARS)]
) -> dict[str, Any]:
    """Multipart ``file`` written at ``path`` (absolute, inside a conversation's workspace)."""
    target = _absolute(path, "path")
    form = await request.form()
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise ApiError(400, "no_file", "send the file as the multipart field 'file'")
    data = await upload.read()
    size = await run_in_threadpool(_write, state, target, data)
    return {"success": True, "file_size": size}


def _read(state: ServerState, path: str) -> bytes:
    _conversation, resolved = owner_of(state, path)
    try:
        # O_NONBLOCK: a FIFO put there opens at once (and is refused below) instead of hanging.
        handle = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ApiError(404, "not_found", f"no file {path[:120]!r}") from None
    except OSError as error:
        raise ApiError(
            400, "not_a_file", f"{path[:120]!r} cannot be read: {error.strerror}"
        ) from None
    with os.fdopen(handle, "rb") as source:
        found = os.fstat(source.fileno())
        if not stat.S_ISREG(found.st_mode):
            raise ApiError(400, "not_a_file", f"{path[:120]!r} is not a regular file")
        if found.st_size > MAX_DOWNLOAD_BYTES:
            raise ApiError(
                413, "file_too_large", f"{path[:120]!r} is larger than {MAX_DOWNLOAD_BYTES} bytes"
            )
        return source.read(MAX_DOWNLOAD_BYTES + 1)[:MAX_DOWNLOAD_BYTES]


@router.get("/file/download")
async def download_file(
    state: State, path: Annotated[str, Query(max_length=PATH_MAX_CHARS)]
) -> Response:
    target = _absolute(path, "path")
    data = await run_in_threadpool(_read, state, target)
    return Response(data, media_type="application/octet-stream")
