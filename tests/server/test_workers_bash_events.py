"""``treadle serve --workers 2``: the OpenHands workspace commands' events listed without a
command id cover the commands of both workers (each keeps those it started), in the order,
pages, filters and refusals a single server (``--workers 1``) gives for the same commands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.scripts import think_steps
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import TreadleClient
from treadle.data.ids import slot_of
from treadle.runtime.settings import ConversationSettings

KEY = "workers-listing-key-0123456789"
COMMANDS = 7
SEARCH = "/openhands/api/bash/bash_events/search"
QUERIES: list[dict[str, Any]] = [
    {},
    {"limit": 3},
    {"limit": 4, "sort_order": "TIMESTAMP_DESC"},
    {"sort_order": "TIMESTAMP_DESC"},
    {"kind__eq": "BashOutput", "limit": 2},
    {"kind__eq": "BashCommand", "sort_order": "TIMESTAMP_DESC", "limit": 5},
    {"order__gt": -1, "limit": 3},
    {"order__gt": 0},
    {"page_id": "5", "limit": 2},
    {"page_id": "not-a-number", "limit": 2},
    {"limit": 5, "unknown": "ignored"},
]
REFUSED: list[dict[str, Any]] = [
    {"limit": 0},
    {"limit": 101},
    {"limit": "many"},
    {"sort_order": "NEWEST"},
    {"order__gt": -2},
    {"kind__eq": "k" * 41},
]


class Served:
    """A server, its client over the OpenHands routes, and the commands started there."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.http = httpx.Client(
            base_url=server.base_url, headers={"X-Session-API-Key": KEY}, timeout=60
        )
        self.texts: dict[str, str] = {}
        """command id -> its command text."""

    def start(self, cwd: Path, text: str) -> dict[str, Any]:
        answer = self.http.post(
            "/openhands/api/bash/start_bash_command", json={"command": text, "cwd": str(cwd)}
        )
        assert answer.status_code == 200, answer.text
        record = answer.json()
        self.texts[record["id"]] = text
        return record

    def finished(self, command_id: str) -> bool:
        page = self.http.get(SEARCH, params={"command_id__eq": command_id}).json()
        return any(event["kind"] == "BashOutput" for event in page["items"])

    def shape(self, query: dict[str, Any]) -> list[tuple[list[tuple[str, str]], bool]]:
        """Each page of the listing, following next_page_id from the page asked: its events
        as (kind, command text) -- ids and times differ from server to server -- and whether
        another page follows."""
        pages = []
        asked = dict(query)
        while True:
            answer = self.http.get(SEARCH, params=asked)
            assert answer.status_code == 200, answer.text
            page = answer.json()
            items = [
                (event["kind"], self.texts[event.get("command_id", event["id"])])
                for event in page["items"]
            ]
            pages.append((items, page["next_page_id"] is not None))
            if page["next_page_id"] is None:
                return pages
            asked["page_id"] = page["next_page_id"]


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[Served, Served]]:
    """A server of two workers and one of a single process, each its own store."""
    made = []
    try:
        for workers in (2, 1):
            server = ServerProcess(
                f"sqlite:///{tmp_path / f'listing-{workers}.db'}",
                api_keys=(KEY,),
                log_dir=tmp_path,
                workers=workers,
            )
            made.append(server.start())
        pair = Served(made[0]), Served(made[1])
        yield pair
        for served in pair:
            served.http.close()
    finally:
        for server in made:
            server.stop()


def workspaces(served: Served, tmp_path: Path, name: str) -> list[tuple[int, Path]]:
    """Two conversations' workspaces, the first of worker 0 and the second of worker 1 (by
    their ids, which hash to the worker that made them); (slot, folder) each."""
    found: dict[int, Path] = {}
    with TreadleClient(served.server.base_url, api_key=KEY) as client:
        for index in range(40):
            folder = tmp_path / f"{name}-{index}"
            folder.mkdir()
            settings = ConversationSettings.scripted_inline(think_steps(1), folder)
            conversation = client.create_conversation(settings, title=f"{name} {index}")
            found.setdefault(slot_of(conversation.id, 2), folder)
            if len(found) == 2:
                return [(0, found[0]), (1, found[1])]
    raise AssertionError("40 conversations, all made by one worker")


def test_the_listing_without_a_command_id_covers_every_worker(
    servers: tuple[Served, Served], tmp_path: Path
) -> None:
    many, single = servers
    for served, name in ((many, "many"), (single, "single")):
        places = workspaces(served, tmp_path, name)
        for index in range(COMMANDS):
            slot, folder = places[index % 2]
            # One that fails, one with output on stderr: their outputs are listed all the same.
            text = f"echo c{index}" + ("; exit 3" if index == 2 else "; echo e >&2")
            record = served.start(folder, text)
            if served is many:  # kept by the worker of the workspace's conversation
                assert slot_of(record["id"], 2) == slot, (index, slot)
        for command_id in served.texts:
            wait_until(lambda s=served, c=command_id: s.finished(c), 120, "a command's end")

    # Every command of both workers, oldest first, each followed by its output.
    listed = many.shape({})
    texts = [many.texts[key] for key in many.texts]
    assert listed == [
        ([(kind, text) for text in texts for kind in ("BashCommand", "BashOutput")], False)
    ]
    assert {slot_of(key, 2) for key in many.texts} == {0, 1}

    for query in QUERIES:
        assert many.shape(query) == single.shape(query), query

    # The events themselves, as a single server writes them (the same fields and values but
    # for ids and times).
    def fields(served: Served) -> list[dict[str, Any]]:
        items = served.http.get(SEARCH, params={"kind__eq": "BashOutput"}).json()["items"]
        return [
            {k: v for k, v in item.items() if k not in ("id", "timestamp", "command_id")}
            for item in items
        ]

    assert fields(many) == fields(single)
    assert [item["exit_code"] for item in fields(many)] == [0, 0, 3, 0, 0, 0, 0]

    # A listing of one command still comes from its worker alone.
    for command_id in many.texts:
        one = many.http.get(SEARCH, params={"command_id__eq": command_id}).json()
        assert [event["kind"] for event in one["items"]] == ["BashCommand", "BashOutput"]

    # Refused as the route refuses it, word for word; and without the key, as ever.
    for query in REFUSED:
        got, want = many.http.get(SEARCH, params=query), single.http.get(SEARCH, params=query)
        assert (got.status_code, got.json()) == (want.status_code, want.json()), query
        assert got.status_code == 422, query
    bare = httpx.get(f"{many.server.base_url}{SEARCH}", timeout=60)
    assert bare.status_code == 401
