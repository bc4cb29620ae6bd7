"""Which HTTP status each error gets (issue 10, item 25): a store outage is 503 with a reason
and Retry-After (retry later), bad input stays 4xx, and nothing answers with a traceback."""

from __future__ import annotations

import asyncio
import sqlite3

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from treadle.server.errors import install_error_handlers, status_of
from treadle.store.base import ConversationNotFound, StoreError, StoreUnavailable
from treadle.store.checks import InvalidConversationId


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (StoreUnavailable("disk full"), 503, "store_unavailable"),
        (sqlite3.OperationalError("disk I/O error"), 503, "store_unavailable"),
        (psycopg.OperationalError("connection lost"), 503, "store_unavailable"),
        (StoreError("not a Treadle store"), 400, "bad_request"),
        (InvalidConversationId("bad id"), 422, "invalid_conversation_id"),
        (ConversationNotFound("c"), 404, "not_found"),
    ],
)
def test_status_of_each_error(error, status, code):
    assert status_of(error) == (status, code)


def call(app: FastAPI, path: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get(path)

    return asyncio.run(go())


def test_an_outage_is_a_503_with_its_reason_and_retry_after():
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/outage")
    def outage() -> None:
        raise StoreUnavailable("the store file was removed under the server")

    @app.get("/driver")
    def driver() -> None:
        raise sqlite3.OperationalError("database or disk is full")

    @app.get("/bug")
    def bug() -> None:
        raise KeyError("x")

    for path, reason in [("/outage", "removed"), ("/driver", "disk is full")]:
        response = call(app, path)
        assert response.status_code == 503
        assert response.headers["retry-after"].isdigit()
        error = response.json()["error"]
        assert error["code"] == "store_unavailable"
        assert reason in error["message"]
    failed = call(app, "/bug")
    assert failed.status_code == 500
    assert failed.json()["error"] == {
        "code": "internal_error",
        "message": "the server failed: KeyError",
    }
