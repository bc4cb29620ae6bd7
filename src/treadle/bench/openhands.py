"""The OpenHands routes (``/openhands``, server/openhands/) beside Treadle's own equivalents, on
one server in one run: a create, an events search page of 100 at 10,000 events, and a
WebSocket frame (an event appended through another store handle until the socket brings it).

Each pair is timed the same way by the same client, so the ratio ``openhands_*_vs_treadle`` is
the server-side cost of speaking the SDK's protocol (its ConversationInfo, the codec's SDK
JSON); the HTTP round trip is common to both. Not the SDK client's own round trip: it
re-fetches the whole event list after every ``run()``, so that figure measures the client.
"""

from __future__ import annotations

import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from treadle.bench.workload import realistic_events
from treadle.events.model import MessageEvent
from treadle.store.urls import open_store

RUNS = 30


Request = tuple[str, str, dict[str, Any]]
"""method, url, httpx keyword arguments"""


def _paired(http: httpx.Client, ours: Request, theirs: Request) -> tuple[float, float]:
    """Median seconds of each request, taken in turns (ours, theirs, ours, ...) so that both
    see the same load of a shared machine; the first round warms caches."""
    timings: tuple[list[float], list[float]] = ([], [])
    for run in range(RUNS + 1):
        for side, (method, url, kwargs) in enumerate((ours, theirs)):
            begin = time.perf_counter()
            http.request(method, url, **kwargs).raise_for_status()
            if run:
                timings[side].append(time.perf_counter() - begin)
    return statistics.median(timings[0]), statistics.median(timings[1])


def _creates(http: httpx.Client, workspace: Path) -> dict[str, float]:
    folder = str(workspace / "bench-create")
    sdk = {
        "agent": {
            "kind": "Agent",
            "llm": {"model": "openai/bench", "base_url": "http://127.0.0.1:9/v1"},
            "tools": [{"name": "terminal"}, {"name": "file_editor"}],
        },
        "workspace": {"kind": "LocalWorkspace", "working_dir": folder},
        "tool_module_qualnames": {},
    }
    own = {
        "settings": {
            "model": {
                "kind": "litellm",
                "model": "openai/bench",
                "base_url": "http://127.0.0.1:9/v1",
            },
            "tools": ["terminal", "file_editor", "think", "finish"],
            "workspace": folder,
        }
    }
    ours, theirs = _paired(
        http,
        ("POST", "/openhands/api/conversations", {"json": sdk}),
        ("POST", "/api/conversations", {"json": own}),
    )
    return {"openhands_create_s": ours, "treadle_create_s": theirs}


def _searches(http: httpx.Client, conversation_id: str, events: int) -> dict[str, float]:
    middle = events // 2
    ours, theirs = _paired(
        http,
        (
            "GET",
            f"/openhands/api/conversations/{conversation_id}/events/search",
            {"params": {"limit": 100, "page_id": str(middle)}},
        ),
        (
            "GET",
            f"/api/conversations/{conversation_id}/events",
            {"params": {"limit": 100, "after_seq": middle - 1}},
        ),
    )
    return {"openhands_search_100_s": ours, "treadle_search_100_s": theirs}


def _frame_latency(url: str, greeted: bool, store_url: str, conversation_id: str) -> float:
    """Median seconds from an append (another store handle) to its frame on the socket;
    ``greeted``: the socket says it is live with a first frame (OpenHands' full_state)."""
    store = open_store(store_url)
    timings = []
    try:
        last = store.get_conversation(conversation_id).event_count - 1
        with connect(url.format(after_seq=last), open_timeout=60, max_size=None) as socket:
            if greeted:
                socket.recv(timeout=60)
            for run in range(RUNS + 1):
                marker = f"bench-frame-{uuid.uuid4().hex}"
                head = store.head(conversation_id)
                event = MessageEvent(source="user", text=marker, parent_id=head)
                begin = time.perf_counter()
                store.append(conversation_id, event)
                while marker not in socket.recv(timeout=60):
                    pass
                if run:
                    timings.append(time.perf_counter() - begin)
    finally:
        store.close()
    return statistics.median(timings)


def openhands_figures(
    base_url: str, store_url: str, workspace: Path, events: int = 10_000
) -> dict[str, float]:
    """The three pairs and their ratios (``base_url``: a server without keys)."""
    store = open_store(store_url)
    conversation_id = store.create_conversation(title="bench openhands").id
    log = realistic_events(events, seed=11)
    for start in range(0, events, 2000):
        store.append_batch(conversation_id, log[start : start + 2000])
    store.close()
    figures: dict[str, float] = {}
    with httpx.Client(base_url=base_url, timeout=300) as http:
        figures.update(_creates(http, workspace))
        figures.update(_searches(http, conversation_id, events))
    ws = base_url.replace("http", "ws", 1)
    figures["openhands_frame_s"] = _frame_latency(
        f"{ws}/openhands/sockets/events/{conversation_id}", True, store_url, conversation_id
    )
    figures["treadle_frame_s"] = _frame_latency(
        f"{ws}/api/conversations/{conversation_id}/events/stream?after_seq={{after_seq}}",
        False,
        store_url,
        conversation_id,
    )
    for name in ("create", "search_100", "frame"):
        figures[f"openhands_{name}_vs_treadle"] = round(
            figures[f"openhands_{name}_s"] / figures[f"treadle_{name}_s"], 2
        )
    return figures
