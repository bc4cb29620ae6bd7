"""What the front of ``treadle serve --workers N`` answers from every worker rather than one:
the listing of the OpenHands workspace commands' events that names no command
(``routing.every_worker``). Each worker keeps the commands it started (their ids hash to it,
``openhands/commands.py``), so no one worker can give that listing.

The front keeps nothing between requests: each listing asks every worker again for its whole
list, merges them as a single server orders its own, and filters, sorts and pages the result
with the route's own code (``openhands/bash_events.py``). The client's request itself goes to a
worker first, as it came: its refusal (a bad limit, a wrong key) is the route's, word for word.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from treadle.server.openhands.bash_events import PAGE_MOST, BashEventsQuery, merged
from treadle.server.workers.supervisor import Workers

SEARCH = b"/openhands/api/bash/bash_events/search"
_WORKER_PAGE = SEARCH + b"?sort_order=TIMESTAMP_DESC&limit=%d&page_id=%d"


@dataclass
class Reply:
    """A whole answer: its status, headers and body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


async def _ask(
    workers: Workers,
    slot: int | None,
    target: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
) -> Reply:
    link = await workers.link(slot)
    answer = await link.request(b"GET", target, headers, body)
    data = b"".join([chunk async for chunk in answer.body()])
    return Reply(answer.status, answer.headers, data)


async def _whole_list(
    workers: Workers, slot: int, headers: list[tuple[bytes, bytes]]
) -> list[dict[str, Any]] | Reply:
    """Worker ``slot``'s events, oldest command first (its refusal, if it refuses).

    Read page by page newest first, each event kept once (by id): the worker's list may change
    between two pages, and newest first it changes only before the page being read (a command
    started, an output come) or after it (the oldest command dropped, ``MAX_COMMANDS``), so an
    event may show twice but none is skipped. It ends: the list never holds more than
    ``MAX_COMMANDS`` commands and their outputs, and each page starts ``PAGE_MOST`` further.
    """
    kept: dict[str, dict[str, Any]] = {}
    start = 0
    while True:
        reply = await _ask(workers, slot, _WORKER_PAGE % (PAGE_MOST, start), headers)
        if reply.status != 200:
            return reply
        page = json.loads(reply.body)
        for event in page["items"]:
            kept.setdefault(event["id"], event)
        if page["next_page_id"] is None:
            return list(kept.values())[::-1]
        start += PAGE_MOST


async def bash_events(
    workers: Workers,
    target: bytes,
    query: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
) -> Reply:
    """The listing over every worker, for the client's request (``target`` and ``query`` as
    it sent them, ``headers`` those the front forwards: its keys). ``WorkerDown`` or
    ``TimeoutError`` as the front's other requests (502, 503)."""
    checked = await _ask(workers, None, target, headers, body)
    if checked.status != 200:
        return checked
    # As the worker read it (Starlette: latin-1, percent-decoded, the last value counts): it
    # took these, so they validate here too.
    asked = BashEventsQuery.model_validate(
        dict(parse_qsl(query.decode("latin-1"), keep_blank_values=True))
    )
    bare = [(name, value) for name, value in headers if name.lower() != b"content-length"]
    tasks = [asyncio.create_task(_whole_list(workers, s, bare)) for s in range(workers.count)]
    try:
        lists = await asyncio.gather(*tasks)
    finally:  # one worker failed, or the client went: the others' requests are dropped
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for found in lists:
        if isinstance(found, Reply):  # a worker that refused what the first one took
            return found
    events = merged(found for found in lists if not isinstance(found, Reply))
    data = json.dumps(asked.page(events), ensure_ascii=False, separators=(",", ":")).encode()
    shown = [(name, value) for name, value in checked.headers if name.lower() != b"content-length"]
    return Reply(200, [*shown, (b"content-length", b"%d" % len(data))], data)
