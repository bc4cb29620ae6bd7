"""Import and export of OpenHands SDK conversations over HTTP, as .tar.gz archives of
conversation folders (the layout ``treadle import|export openhands`` reads and writes)."""

from __future__ import annotations

import io
import tarfile
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from treadle.server.errors import ApiError
from treadle.server.state import ServerState, server_state
from treadle.store.openhands.layout import find_conversation_folders
from treadle.store.openhands.reader import read_conversation_folder
from treadle.store.openhands.transfer import (
    ImportResult,
    export_conversation,
    import_conversation,
)

router = APIRouter(prefix="/api/conversations", tags=["import and export"])
State = Annotated[ServerState, Depends(server_state)]


def _unpack(archive: bytes, into: Path) -> None:
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            # The "data" filter refuses absolute paths, .. and links leading out of ``into``.
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as error:
        raise ApiError(422, "bad_archive", f"not a readable tar(.gz) archive: {error}") from None


def _import_all(state: ServerState, archive: bytes, replace: bool) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="treadle-import-") as tmp:
        root = Path(tmp)
        _unpack(archive, root)
        folders = find_conversation_folders(root) or [
            folder for child in root.iterdir() for folder in find_conversation_folders(child)
        ]
        if not folders:
            raise ApiError(
                422, "no_conversation", "the archive holds no OpenHands conversation folder"
            )
        results = []
        for folder in folders:
            result = _import_one(state, folder, replace)
            results.append(
                {
                    "folder": folder.name,
                    "conversation_id": result.conversation_id,
                    "imported": result.imported,
                    "replaced": result.replaced,
                    "event_count": result.event_count,
                    "problems": [asdict(problem) for problem in result.problems],
                    "violations": [v.to_json_dict() for v in result.violations],
                }
            )
        return results


def _import_one(state: ServerState, folder: Path, replace: bool) -> ImportResult:
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
async def import_openhands(request: Request, state: State, replace: bool = False) -> dict:
    """Body: a .tar.gz of one conversation folder (or of a folder of them). A conversation the
    store cannot hold is not imported; each result names its problems and files."""
    archive = await request.body()
    if not archive:
        raise ApiError(422, "empty_body", "send the .tar.gz archive as the request body")
    results = await run_in_threadpool(_import_all, state, archive, replace)
    return {"results": results, "imported": sum(1 for r in results if r["imported"])}


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
