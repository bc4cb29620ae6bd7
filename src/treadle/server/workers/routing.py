"""Which worker serves a request: the one a conversation id (or an OpenHands workspace
command's id) in its path or query hashes to (``treadle.data.ids.slot_of``); every worker for
the listing of workspace commands' events that names no command (``every_worker``); any
worker for the rest. Read from the path exactly as the worker's router reads it (decoded, not
normalised: a path with a '.' or '..' segment matches no route, and the front refuses it).

A worker that learns only from the body or the store that a request is another worker's (an
OpenHands create naming its id, a workspace call whose folder is a conversation's) answers 421
naming that worker (``Elsewhere``); the front buffered such requests (``REROUTABLE``) and sends
them there once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from treadle.data.ids import born_in, slot_of
from treadle.server.workers.run_slots import MOST_FILES, RunSlots

WORKER_HEADER = "x-treadle-worker"
"""A worker's 421 names the worker the request belongs to here (never shown to a client)."""

_BY_PATH = ("/api/conversations/", "/openhands/api/conversations/", "/openhands/sockets/events/")
_COMMAND = "/openhands/api/bash/bash_commands/"
_COMMAND_SEARCH = "/openhands/api/bash/bash_events/search"

REROUTABLE = frozenset(
    {
        ("POST", "/openhands/api/conversations"),
        ("POST", "/openhands/api/bash/start_bash_command"),
        ("POST", "/openhands/api/file/upload"),
        ("GET", "/openhands/api/file/download"),
    }
)
"""Requests whose worker only a worker can tell (body buffered by the front, within
--max-body-bytes, so that it can be sent again)."""


@dataclass(frozen=True)
class WorkerPlace:
    """A worker's place in its server: its slot of ``count``, and the lease owner prefix all
    the server's workers share (``RunManager.owner_group``)."""

    slot: int
    count: int
    group: str
    folder: str | None = None
    """The front's private folder (``RunSlots``' lock files)."""

    def serves(self, key: str) -> bool:
        return slot_of(key, self.count) == self.slot

    def run_slots(self, max_running: int) -> RunSlots | None:
        """--max-running over all the server's workers (None: each worker's own)."""
        if self.folder is None or max_running > MOST_FILES:
            return None
        return RunSlots(Path(self.folder), max_running)


class Elsewhere(Exception):
    """This request is the worker ``slot``'s (answered 421 with ``WORKER_HEADER``)."""

    def __init__(self, slot: int) -> None:
        super().__init__(f"served by worker {slot}")
        self.slot = slot


def check_here(key: str) -> None:
    """Raise ``Elsewhere`` when ``key`` belongs to another worker of this server."""
    slot, count = born_in()
    owner = slot_of(key, count)
    if owner != slot:
        raise Elsewhere(owner)


def odd_path(path: str) -> bool:
    """A '.' or '..' segment: no route has one; refused, so that nothing between the front
    and a worker could read the path otherwise than the front routed it."""
    return any(segment in (".", "..") for segment in path.split("/"))


def route_key(path: str, query: bytes) -> str | None:
    """The id that decides the worker of a request, or None (any worker)."""
    for prefix in _BY_PATH:
        if path.startswith(prefix):
            return path[len(prefix) :].split("/", 1)[0] or None
    if path.startswith(_COMMAND):
        return path[len(_COMMAND) :].split("/", 1)[0] or None
    if path == _COMMAND_SEARCH and query:
        # As Starlette reads a query: latin-1, then percent-decoded; the last value counts.
        values = [
            value
            for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True)
            if name == "command_id__eq"
        ]
        return values[-1][:64] if values else None
    return None


def every_worker(method: str, path: str, query: bytes) -> bool:
    """Whether the front answers the request from every worker (``fan_out``): the listing of
    workspace commands' events that names no command, each worker holding those it started."""
    return method == "GET" and path == _COMMAND_SEARCH and route_key(path, query) is None


def worker_of(path: str, query: bytes, count: int) -> int | None:
    key = route_key(path, query)
    return None if key is None else slot_of(key, count)
