"""Errors as JSON bodies ``{"error": {"code", "message"}}`` with the right status code."""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

from treadle.errors import ContractError, TreadleError
from treadle.runtime.budget import BudgetLowered
from treadle.runtime.errors import (
    ConversationBusy,
    ConversationError,
    ForkNeedsWorkspace,
    NothingPending,
    NotPending,
    NotRunnable,
    NotWaiting,
    TooManyRunning,
)
from treadle.runtime.hooks import PromptBlocked
from treadle.runtime.settings import SandboxRefused
from treadle.runtime.snapshots import NoSnapshot, RestoreBusy, SnapshotError
from treadle.runtime.workspace.base import SandboxUnavailable, WorkspaceError, WorkspacePathError
from treadle.server.workers.routing import WORKER_HEADER, Elsewhere
from treadle.store.base import (
    ConversationExists,
    ConversationNotFound,
    EventNotFound,
    StoreError,
    StoreUnavailable,
)
from treadle.store.checks import InvalidConversationId

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5
"""What a 503 (the store is out now) asks clients to wait before they retry."""
OUTAGES: tuple[type[Exception], ...] = (
    StoreUnavailable,
    # A driver's own outage errors that a store let through: still an outage, not bad input.
    sqlite3.OperationalError,
    psycopg.OperationalError,
)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(message)


class BodyTooLarge(HTTPException):
    """A request body over the server's limit, found while it streams in (HTTP 413). An
    HTTPException so that FastAPI's body reading passes it on instead of calling it a 400."""

    code = "body_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"request body over {limit} bytes (the server's --max-body-bytes); send less"
        )


class AsciiJSONResponse(JSONResponse):
    """JSON written as ASCII: text that quotes a client's input (a lone surrogate from JSON's
    "\\ud800", an undecodable file name) stays encodable, so an error never becomes a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
        ).encode()


def error_body(code: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    body.update(details)
    return {"error": body}


async def json_response(send: Send, status: int, body: dict[str, Any]) -> None:
    """A JSON response written straight to ASGI (for middleware, before any route)."""
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


_CONVERSATION_ERRORS: dict[type[ConversationError], tuple[int, str]] = {
    NothingPending: (409, "nothing_pending"),
    NotWaiting: (409, "not_waiting"),
    NotPending: (409, "not_pending"),
    ConversationBusy: (409, "already_running"),
    NotRunnable: (409, "not_runnable"),
    TooManyRunning: (429, "too_many_running"),
    NoSnapshot: (409, "no_snapshot"),
    RestoreBusy: (409, "restore_in_progress"),
    ForkNeedsWorkspace: (422, "fork_needs_workspace"),
    PromptBlocked: (403, "prompt_blocked"),
}
"""Why a conversation cannot do that now, as HTTP (any other ConversationError: 409)."""


def status_of(error: Exception) -> tuple[int, str]:
    """HTTP status and code for a Treadle error: outages are 503 (retry later), bad input 4xx."""
    if isinstance(error, ApiError):
        return error.status, error.code
    if isinstance(error, OUTAGES):
        return 503, "store_unavailable"
    if isinstance(error, InvalidConversationId):
        return 422, "invalid_conversation_id"
    if isinstance(error, SandboxRefused):
        return 403, "sandbox_refused"
    if isinstance(error, SandboxUnavailable):
        return 503, "sandbox_unavailable"
    if isinstance(error, WorkspaceError | WorkspacePathError):
        return 422, "bad_workspace"
    if isinstance(error, BudgetLowered):
        return 422, "budget_lowered"
    if isinstance(error, ConversationNotFound | EventNotFound):
        return 404, "not_found"
    if isinstance(error, ConversationExists):
        return 409, "conflict"
    if isinstance(error, ConversationError):
        for kind, answer in _CONVERSATION_ERRORS.items():
            if isinstance(error, kind):
                return answer
        return 409, "conflict"
    if isinstance(error, ContractError):
        return 422, error.contract
    if isinstance(error, SnapshotError):
        return 400, "snapshot_failed"
    if isinstance(error, StoreError):
        return 400, "bad_request"
    return 400, "bad_request"


def install_error_handlers(app: FastAPI) -> None:
    async def treadle_error(_request: Request, error: Exception) -> AsciiJSONResponse:
        status, code = status_of(error)
        if code == "store_unavailable":
            logger.warning("store unavailable: %s", error)
            return AsciiJSONResponse(
                error_body(code, f"the store is unavailable now, retry later: {error}"),
                status_code=503,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        # Past --max-running: when to ask again (a run of another conversation may end).
        headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 429 else None
        return AsciiJSONResponse(error_body(code, str(error)), status_code=status, headers=headers)

    async def unexpected_error(_request: Request, error: Exception) -> AsciiJSONResponse:
        # Starlette logs the traceback; the client gets JSON without one.
        return AsciiJSONResponse(
            error_body("internal_error", f"the server failed: {type(error).__name__}"),
            status_code=500,
        )

    async def validation_error(
        _request: Request, error: RequestValidationError
    ) -> AsciiJSONResponse:
        problems = [
            f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
        ]
        return AsciiJSONResponse(
            error_body("invalid_request", "; ".join(problems) or "invalid request"),
            status_code=422,
        )

    async def http_error(_request: Request, error: StarletteHTTPException) -> AsciiJSONResponse:
        return AsciiJSONResponse(
            error_body(getattr(error, "code", "http_error"), str(error.detail)),
            status_code=error.status_code,
            headers=getattr(error, "headers", None),
        )

    async def elsewhere(_request: Request, error: Elsewhere) -> AsciiJSONResponse:
        # Only the front reads this (it sends the request on to that worker).
        return AsciiJSONResponse(
            error_body("misdirected", str(error)),
            status_code=421,
            headers={WORKER_HEADER: str(error.slot)},
        )

    app.add_exception_handler(Elsewhere, elsewhere)  # type: ignore[arg-type]
    app.add_exception_handler(TreadleError, treadle_error)
    for outage in OUTAGES:
        app.add_exception_handler(outage, treadle_error)
    app.add_exception_handler(Exception, unexpected_error)
    app.add_exception_handler(ApiError, treadle_error)
    # Starlette types a handler as taking any Exception; these take the class they are
    # registered for, the only one Starlette passes them.
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
