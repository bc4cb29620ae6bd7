"""The listing of workspace commands' events (``GET /openhands/api/bash/bash_events/search``):
its query (``BashEventsQuery``: the route's parameters and their limits), its filter, sort and
page (``BashEventsQuery.page``), and the merge of several processes' lists into the one a single
server would give (``merged``).

One place for all of it because two callers answer that listing: the route, from this
process's commands, and the front of ``treadle serve --workers N``, which lists every worker's
commands when no ``command_id__eq`` names the one worker that holds a command
(``server/workers/fan_out.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

PAGE_MOST = 100
"""The largest ``limit`` the listing takes."""


class BashEventsQuery(BaseModel):
    """The listing's query parameters, as the SDK's ``RemoteWorkspace`` sends them (unknown
    ones ignored, the last of a repeated one counts: as FastAPI reads a query)."""

    kind__eq: str | None = Field(None, max_length=40)
    command_id__eq: str | None = Field(None, max_length=64)
    order__gt: int | None = Field(None, ge=-1, le=10**9)
    sort_order: str = Field("TIMESTAMP", pattern="^(TIMESTAMP|TIMESTAMP_DESC)$")
    limit: int = Field(PAGE_MOST, gt=0, le=PAGE_MOST)
    page_id: str | None = Field(None, max_length=40)

    def page(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """The answer for ``events`` (oldest command first, each command's record then its
        outputs): filtered, sorted, and the page ``page_id`` names (an offset; anything else
        is the first page)."""
        if self.command_id__eq is not None:
            events = [event for event in events if _command_of(event) == self.command_id__eq]
        if self.kind__eq is not None:
            events = [event for event in events if event["kind"] == self.kind__eq]
        if self.order__gt is not None:
            # A command's record has no order: it counts as -1, before its first output.
            events = [event for event in events if event.get("order", -1) > self.order__gt]
        if self.sort_order == "TIMESTAMP_DESC":
            events = events[::-1]
        start = int(self.page_id) if self.page_id and self.page_id.isdigit() else 0
        end = start + self.limit
        return {"items": events[start:end], "next_page_id": str(end) if end < len(events) else None}


def _command_of(event: dict[str, Any]) -> str:
    return str(event["id"] if event["kind"] == "BashCommand" else event.get("command_id"))


def _started(group: list[dict[str, Any]]) -> datetime:
    # Parsed, not compared as text: isoformat() leaves out the microseconds when they are 0.
    return datetime.fromisoformat(group[0]["timestamp"])


def _groups(events: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """One list per command, its record then its outputs. An output whose record is not there
    is left out: a single server never lists one (its command was dropped while a caller
    read the list page by page)."""
    groups: list[list[dict[str, Any]]] = []
    for event in events:
        if event["kind"] == "BashCommand":
            groups.append([event])
        elif groups and event.get("command_id") == groups[-1][0]["id"]:
            groups[-1].append(event)
    return groups


def merged(lists: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several processes' lists (each oldest command first, as ``Commands.events`` gives them)
    as one: the commands by their start, each still followed by its outputs. Each list keeps
    its own order (a merge, not a sort: a process's commands are in the order it started them
    even if its clock stepped back); a tie goes to the earlier list."""
    return [event for group in heapq.merge(*map(_groups, lists), key=_started) for event in group]
