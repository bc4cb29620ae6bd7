"""Errors as JSON bodies ``{"error": {"code", "message"}}`` with the right status code."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

from treadle.errors import ContractError, TreadleError
from treadle.runtime.conversation import ConversationError
from treadle.store.base import ConversationExists, ConversationNotFound, EventNotFound, StoreError


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(message)


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


def status_of(error: Exception) -> tuple[int, str]:
    """HTTP status and code for a Treadle error."""
    if isinstance(error, ApiError):
        return error.status, error.code
    if isinstance(error, ConversationNotFound | EventNotFound):
        return 404, "not_found"
    if isinstance(error, ConversationExists):
        return 409, "conflict"
    if isinstance(error, ConversationError):
        return 409, "conflict"
    if isinstance(error, ContractError):
        return 422, error.contract
    if isinstance(error, StoreError):
        return 400, "bad_request"
    return 400, "bad_request"


def install_error_handlers(app: FastAPI) -> None:
    async def treadle_error(_request: Request, error: Exception) -> JSONResponse:
        status, code = status_of(error)
        return JSONResponse(error_body(code, str(error)), status_code=status)

    async def validation_error(_request: Request, error: RequestValidationError) -> JSONResponse:
        problems = [
            f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
        ]
        return JSONResponse(
            error_body("invalid_request", "; ".join(problems) or "invalid request"),
            status_code=422,
        )

    async def http_error(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            error_body("http_error", str(error.detail)), status_code=error.status_code
        )

    app.add_exception_handler(TreadleError, treadle_error)
    app.add_exception_handler(ApiError, treadle_error)
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
