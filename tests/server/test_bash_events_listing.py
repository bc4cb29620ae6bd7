"""The listing of workspace commands' events (``server/openhands/bash_events.py``): the
route's filter, sort and page, and the merge of several workers' lists into the order one
server gives (commands by their start, each followed by its outputs); and the front's
listing over workers, one of them gone: the 502 the front gives for any request."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from pydantic import ValidationError

from treadle.data.ids import slot_of
from treadle.server.openhands.bash_events import BashEventsQuery, merged
from treadle.server.workers import fan_out
from treadle.server.workers.front import Front
from treadle.server.workers.link import Link


def command(key: str, at: str) -> dict[str, Any]:
    return {"id": key, "timestamp": at, "command": f"echo {key}", "kind": "BashCommand"}


def output(key: str, at: str) -> dict[str, Any]:
    return {
        "id": f"out-{key}",
        "timestamp": at,
        "command_id": key,
        "order": 0,
        "kind": "BashOutput",
    }


def of(*keys: str, outputs: bool = True) -> list[dict[str, Any]]:
    """Commands ``keys`` started a second apart (``a`` at 00:00:01, ``b`` at 00:00:02, ...),
    each with its output 10 s later (after every start)."""
    events = []
    for key in keys:
        second = ord(key) - ord("a") + 1
        events.append(command(key, f"2025-01-01T00:00:{second:02d}+00:00"))
        if outputs:
            events.append(output(key, f"2025-01-01T00:00:{second + 10:02d}.5+00:00"))
    return events


def ids(events: list[dict[str, Any]]) -> list[str]:
    return [event["id"] for event in events]


def test_lists_merge_by_the_commands_start_each_followed_by_its_outputs() -> None:
    one, other = of("a", "d", "e"), of("b", "c", "f")
    assert ids(merged([one, other])) == ids(of("a", "b", "c", "d", "e", "f"))
    assert merged([one]) == one
    assert merged([[], one, []]) == one
    # A command still running (no output yet) keeps its place.
    running = of("b", outputs=False)
    assert ids(merged([of("a", "c"), running])) == ["a", "out-a", "b", "c", "out-c"]


def test_a_list_keeps_its_own_order_and_a_tie_goes_to_the_earlier_list() -> None:
    stepped_back = [
        command("z", "2025-01-01T00:00:09+00:00"),
        command("y", "2025-01-01T00:00:01+00:00"),
    ]
    assert ids(merged([stepped_back])) == ["z", "y"]
    same = "2025-01-01T00:00:05+00:00"
    assert ids(merged([[command("p", same)], [command("q", same)]])) == ["p", "q"]
    # 00:00:05 (no microseconds written) is before 00:00:05.000001 whichever is read first.
    assert ids(
        merged([[command("r", "2025-01-01T00:00:05.000001+00:00")], [command("s", same)]])
    ) == ["s", "r"]


def test_an_output_without_its_command_is_left_out() -> None:
    orphan = [output("gone", "2025-01-01T00:00:00+00:00"), *of("a")]
    assert ids(merged([orphan])) == ["a", "out-a"]


def test_the_page_filters_sorts_and_pages_as_the_route_did() -> None:
    events = of("a", "b", "c")
    everything = BashEventsQuery().page(events)
    assert everything == {"items": events, "next_page_id": None}
    first = BashEventsQuery(limit=4).page(events)
    assert ids(first["items"]) == ids(events[:4])
    assert first["next_page_id"] == "4"
    rest = BashEventsQuery(limit=4, page_id="4").page(events)
    assert ids(rest["items"]) == ids(events[4:])
    assert rest["next_page_id"] is None
    newest = BashEventsQuery(sort_order="TIMESTAMP_DESC", limit=2).page(events)
    assert ids(newest["items"]) == ["out-c", "c"]
    outputs = BashEventsQuery(kind__eq="BashOutput").page(events)
    assert ids(outputs["items"]) == ["out-a", "out-b", "out-c"]
    assert BashEventsQuery(order__gt=-1).page(events) == outputs  # a record has no order
    assert BashEventsQuery(order__gt=0).page(events)["items"] == []
    one = BashEventsQuery(command_id__eq="b").page(events)
    assert ids(one["items"]) == ["b", "out-b"]
    assert BashEventsQuery(page_id="x", limit=1).page(events)["items"] == events[:1]
    assert BashEventsQuery(page_id="60").page(events) == {"items": [], "next_page_id": None}


@pytest.mark.parametrize("query", [{"limit": 0}, {"limit": 101}, {"sort_order": "NEWEST"}])
def test_the_query_refuses_what_the_route_refuses(query: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        BashEventsQuery.model_validate(query)


class OneWorkerUp:
    """Two workers: 0 answers every listing with one command, 1 is gone (its socket too)."""

    count = 2

    def __init__(self, up: str, gone: str) -> None:
        self.links = [Link(up), Link(gone)]

    async def link(self, index: int | None) -> Link:
        return self.links[index or 0]


async def _serve_one_command(path: str) -> asyncio.AbstractServer:
    body = b'{"items":[{"id":"a","timestamp":"2025-01-01T00:00:01+00:00","kind":"BashCommand"}],"next_page_id":null}'

    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while await reader.readuntil(b"\r\n\r\n"):  # GETs without a body
                writer.write(head % len(body) + body)
                await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(answer, path)


def test_a_worker_gone_gets_the_fronts_502(tmp_path) -> None:
    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        up = str(tmp_path / "up.sock")
        server = await _serve_one_command(up)
        try:
            front = Front(OneWorkerUp(up, str(tmp_path / "gone.sock")))  # type: ignore[arg-type]
            transport = httpx.ASGITransport(app=front)
            async with httpx.AsyncClient(transport=transport, base_url="http://front") as client:
                listing = await client.get("/openhands/api/bash/bash_events/search")
                ours = next(f"c{n}" for n in range(100) if slot_of(f"c{n}", 2) == 0)
                one = await client.get(
                    "/openhands/api/bash/bash_events/search", params={"command_id__eq": ours}
                )
            return listing, one
        finally:
            server.close()

    listing, one = asyncio.run(scenario())
    assert listing.status_code == 502, listing.text
    assert listing.json()["error"]["code"] == "worker_down"
    assert listing.headers["retry-after"]
    # The same front, asked for a command of the worker that is up, gets that worker's answer.
    assert one.status_code == 200, one.text


class ChangingWorker:
    """One worker read page by page through the route's own page, its list changed after
    each page it serves (``changes``, one a page)."""

    count = 1

    def __init__(self, events: list[dict[str, Any]], changes: list[Any]) -> None:
        self.events = events
        self.changes = changes

    async def link(self, _index: int | None) -> ChangingWorker:
        return self

    async def request(self, _method: bytes, target: bytes, _headers: Any, _body: Any) -> Any:
        query = dict(parse_qsl(target.decode().split("?", 1)[1]))
        data = json.dumps(BashEventsQuery.model_validate(query).page(self.events)).encode()
        if self.changes:
            self.changes.pop(0)(self.events)

        class Answered:
            status, headers = 200, []

            async def body(self) -> AsyncIterator[bytes]:
                yield data

        return Answered()


def test_a_worker_read_page_by_page_while_its_commands_change_skips_none(monkeypatch) -> None:
    monkeypatch.setattr(fan_out, "PAGE_MOST", 2)
    events = of("a", "b", "c")  # newest first: out-c c | out-b b | out-a a

    def started(events: list[dict[str, Any]]) -> None:
        events += of("d", outputs=False)  # before the page read: everything shifts one on

    def dropped(events: list[dict[str, Any]]) -> None:
        del events[:2]  # the oldest command goes (MAX_COMMANDS): after the page read

    worker = ChangingWorker(events, [started, dropped])
    found = asyncio.run(fan_out._whole_list(worker, 0, []))  # type: ignore[arg-type]
    # Once each, oldest first; "a", dropped before its page was read, is gone; "d", started
    # after the newest page was read, is not seen (it was not there when the listing began).
    assert ids(found) == ["b", "out-b", "c", "out-c"]
