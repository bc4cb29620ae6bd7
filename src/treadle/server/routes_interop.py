"""Import and export of OpenHands SDK conversations over HTTP, as .tar.gz archives of
conversation folders (the layout ``treadle import|export openhands`` reads and writes)."""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from treadle.errors import TreadleError
from treadle.runtime.errors import ConversationBusy
from treadle.server.errors import ApiError, AsciiJSONResponse, error_body
from treadle.server.state import ServerState, server_state
from treadle.store.base import StoreUnavailable
from treadle.store.openhands.layout import find_conversation_folders
from treadle.store.openhands.problems import UNREADABLE, FolderProblem
from treadle.store.openhands.reader import read_conversation_folder
from treadle.store.openhands.transfer import (
    CONVERSATION_EXISTS,
    ArchiveError,
    ArchiveTooLarge,
    ImportResult,
    export_conversation,
    import_conversation,
    unpack_archive,
)

router = APIRouter(prefix="/api/conversations", tags=["import and export"])
State = Annotated[ServerState, Depends(server_state)]


def _import_all(state: ServerState, folder: Path, replace: bool) -> list[dict[str, Any]]:
    root = folder / "unpacked"
    root.mkdir()
    with (folder / "archive").open("rb") as archive:
        try:
            unpack_archive(archive, root, state.archive_limits)
        except ArchiveTooLarge as error:
            raise ApiError(413, "archive_too_large", str(error)) from None
        except ArchiveError as error:
            raise ApiError(422, "bad_archive", str(error)) from None
    folders = find_conversation_folders(root) or [
        folder for child in root.iterdir() for folder in find_conversation_folders(child)
    ]
    if not folders:
        raise ApiError(422, "no_conversation", "the archive holds no OpenHands conversation folder")
    return [_import_one(state, folder, replace) for folder in folders]


def _import_one(state: ServerState, folder: Path, replace: bool) -> dict[str, Any]:
    try:
        result = _import_folder(state, folder, replace)
    except (StoreUnavailable, ConversationBusy):
        raise  # an outage (503), or a run holds it (409): not this folder's fault
    except (TreadleError, ValueError, RecursionError) as error:
        # The reader reports bad content as problems; anything it still raises is this
        # folder's fault too (bad input), never the server's.
        result = ImportResult(folder=folder, conversation_id=None)
        result.problems.append(FolderProblem(UNREADABLE, f"cannot be imported: {error}"))
    return {
        "folder": folder.name,
        "conversation_id": result.conversation_id,
        "imported": result.imported,
        "replaced": result.replaced,
        "event_count": result.event_count,
        "problems": [asdict(problem) for problem in result.problems],
        "violations": [v.to_json_dict() for v in result.violations],
    }


def _import_folder(state: ServerState, folder: Path, replace: bool) -> ImportResult:
    """Import one folder; a replace holds the run lease of the conversation it replaces (409
    while that runs in any server) and drops this process's object of the replaced one."""
    conversation_id = read_conversation_folder(folder).conversation_id if replace else None
    if conversation_id is None:
        return import_conversation(state.store, folder, replace=replace)
    with state.runs.exclusive(conversation_id, "pause it before replacing it"):
        result = import_conversation(state.store, folder, replace=replace)
        if result.replaced:
            state.runs.forget(conversation_id)
        return result


@router.post("/import/openhands")
async def import_openhands(
    request: Request, state: State, replace: bool = False
) -> AsciiJSONResponse:
    """Body: a .tar.gz of one conversation folder (or of a folder of them). A conversation the
    store cannot hold is not imported; each result names its problems and files."""
    # The archive goes to a temp folder as it arrives (never whole in memory); the folder and
    # all that was unpacked into it are removed whatever happens.
    folder = Path(tempfile.mkdtemp(prefix="treadle-import-"))
    try:
        size = 0
        with (folder / "archive").open("wb") as archive:
            async for chunk in request.stream():
                size += len(chunk)
                archive.write(chunk)
        if not size:
            raise ApiError(422, "empty_body", "send the .tar.gz archive as the request body")
        results = await run_in_threadpool(_import_all, state, folder, replace)
    finally:
        await run_in_threadpool(shutil.rmtree, folder, True)
    imported = sum(1 for r in results if r["imported"])
    if imported:
        return AsciiJSONResponse({"results": results, "imported": imported})
    # Nothing was imported: an error status, still with every folder's problems.
    problems = [p for r in results for p in r["problems"]]
    exists = bool(problems) and all(p["code"] == CONVERSATION_EXISTS for p in problems)
    first = problems[0] if problems else {"code": "", "message": "nothing to import"}
    return AsciiJSONResponse(
        {
            **error_body(
                "conflict" if exists else "not_imported",
                f"nothing was imported: {first['code']}: {first['message']}"
                + (f" [{', '.join(first['files'])}]" if first.get("files") else ""),
            ),
            "results": results,
            "imported": 0,
        },
        status_code=409 if exists else 422,
    )


def _export(state: ServerState, conversation_id: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="treadle-export-") as tmp:
        folder = Path(tmp) / conversation_id
        export_conversation(state.store, conversation_id, folder)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(folder, arcname=conversation_id)
        return buffer.getvalue()


@router.get("/{conversation_id}/export/openhands")
async def export_openhands(conversation_id: str, state: State) -> Response:
    """The conversation as the OpenHands SDK's folder layout, in a .tar.gz."""
    state.store.get_conversation(conversation_id)  # 404 first
    data = await run_in_threadpool(_export, state, conversation_id)
    return Response(
        data,
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{conversation_id}.tar.gz"'},
    )
