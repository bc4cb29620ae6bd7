"""Reading the OpenHands routes' inputs: JSON bodies (depth and type checked before any parser
recurses), conversation ids (UUIDs, as the SDK requires); the per-conversation lock that
serialises racing clients, and waiting out a run that is just letting go (``when_free``)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from fastapi import Request

from treadle.events.json_limits import JsonLimitError, check_json_depth
from treadle.runtime.errors import ConversationBusy
from treadle.runtime.status import ConversationStatus, read_status
from treadle.server.errors import ApiError
from treadle.server.state import ServerState
from treadle.store.base import ConversationInfo, ConversationNotFound


async def json_object(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The request's JSON object body (``{}`` for an empty optional one); 422 otherwise."""
    raw = await request.body()  # the security middleware caps its size
    if not raw.strip():
        if optional:
            return {}
        raise ApiError(422, "empty_body", "send a JSON object as the request body")
    try:
        check_json_depth(raw)
        value = json.loads(raw)
    except JsonLimitError as error:
        raise ApiError(422, "bad_json", str(error)) from None
    except (ValueError, RecursionError) as error:
        raise ApiError(422, "bad_json", f"the body is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ApiError(422, "bad_json", "the body must be a JSON object")
    return value


def conversation_uuid(conversation_id: str) -> str:
    """The id in the form the SDK sends (a UUID's canonical text); 422 when it is none."""
    try:
        return str(uuid.UUID(conversation_id))
    except (ValueError, TypeError, AttributeError):
        raise ApiError(
            422,
            "bad_conversation_id",
            "conversation ids on the OpenHands API are UUIDs (e.g. "
            "3f2b1c9e-8a1d-4e2f-9b7c-1a2b3c4d5e6f)",
        ) from None


def stored(state: ServerState, conversation_id: str) -> ConversationInfo:
    """The stored conversation for a path id (404 when none; raised as the store's)."""
    canonical = conversation_uuid(conversation_id)
    try:
        return state.store.get_conversation(canonical)
    except ConversationNotFound:
        raise ApiError(404, "not_found", f"conversation {canonical} not found") from None


ENDING_WAIT_S = 30.0
"""Longest wait for a run that has ended in the log to let go of the conversation."""

T = TypeVar("T")


def when_free(state: ServerState, conversation_id: str, action: Callable[[], T]) -> T:
    """``action()``, tried again while it meets ``ConversationBusy`` from a run whose log says
    it has stopped (waiting, paused, finished...): its holder lets go of the lease just after
    recording that, and a client that saw the status must not be told "busy" for it. A run
    that really runs (the log says RUNNING) is busy at once."""
    deadline = time.monotonic() + ENDING_WAIT_S
    while True:
        try:
            return action()
        except ConversationBusy:
            status, _reason = read_status(state.store, conversation_id)
            if status is ConversationStatus.RUNNING or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class ConversationLocks:
    """One lock per conversation: the OpenHands routes that decide from its state (run,
    respond to a confirmation, pause) take it, so two clients racing are served one after
    the other, each seeing what the other did."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._users: dict[str, int] = {}
        self._guard = threading.Lock()

    @contextmanager
    def held(self, conversation_id: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(conversation_id, threading.Lock())
            self._users[conversation_id] = self._users.get(conversation_id, 0) + 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                self._users[conversation_id] -= 1
                if not self._users[conversation_id]:  # nobody waits: the lock goes
                    del self._users[conversation_id]
                    del self._locks[conversation_id]
