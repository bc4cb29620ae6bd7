"""``treadle bench server``: the agent server over HTTP and WebSocket at 100,000 stored events.

A real ``treadle serve`` child process on 127.0.0.1: search pages of 100 (p50/p99), live
fan-out of 1,000 events to 50 WebSocket subscribers (delivery latency), a reconnect after
10,000 missed events (it must catch up without re-reading older events), the server's threads,
fds and RSS before and after 200 streams opened and closed, the time of 50 conversations
run at once against one run alone (``concurrent_50_vs_1``), and the OpenHands routes beside
Treadle's own (``openhands_*_vs_treadle``, bench/openhands.py).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from treadle.bench.openhands import openhands_figures
from treadle.bench.store import build_conversation, catch_up_text_index
from treadle.bench.workload import realistic_events
from treadle.client import RemoteError, TreadleClient
from treadle.events.model import MessageEvent
from treadle.runtime.settings import ConversationSettings
from treadle.server.process import ServerProcess
from treadle.store.urls import open_store

CHURN_AT_ONCE = 10
"""Streams open at a time while 200 are opened and closed."""
CONCURRENT_STEPS = 10
"""Model steps (a 0.2 s terminal call each) of every conversation in the concurrency figure."""


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _search_pages(base_url: str, conversation_id: str, requests: int) -> dict[str, float]:
    url = f"{base_url}/api/conversations/{conversation_id}/events"
    filters: list[dict[str, str | int]] = [
        {"kinds": "action", "limit": 100},
        {"sources": "user", "limit": 100},
        {"after_seq": 50_000, "limit": 100},
        {"order": "desc", "limit": 100},
    ]
    timings: list[float] = []
    with httpx.Client() as client:
        for index in range(requests):
            start = time.perf_counter()
            response = client.get(url, params=filters[index % len(filters)])
            timings.append(time.perf_counter() - start)
            response.raise_for_status()
    return {
        "search_page_p50_s": _percentile(timings, 0.5),
        "search_page_p99_s": _percentile(timings, 0.99),
    }


def _fan_out(
    base_url: str, store_url: str, conversation_id: str, subscribers: int, events: int
) -> dict[str, float]:
    store = open_store(store_url)
    start_seq = store.get_conversation(conversation_id).event_count - 1
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    ready = threading.Barrier(subscribers + 1)
    last_seq = start_seq + events

    def subscriber() -> None:
        url = (
            base_url.replace("http", "ws")
            + f"/api/conversations/{conversation_id}/events/stream?after_seq={start_seq}&batch=true"
        )
        with connect(url, max_size=2**26) as socket_:
            ready.wait()
            while True:
                frame = json.loads(socket_.recv(timeout=120))
                arrived = time.time()
                events = [
                    m
                    for m in (frame if isinstance(frame, list) else [frame])
                    if m["type"] == "event"
                ]
                with lock:
                    latencies.extend(arrived - sent_at[m["seq"]] for m in events)
                if events and events[-1]["seq"] >= last_seq:
                    return

    threads = [threading.Thread(target=subscriber) for _ in range(subscribers)]
    for thread in threads:
        thread.start()
    ready.wait()
    time.sleep(0.5)  # every socket has joined its hub
    batch = realistic_events(events, seed=11)
    previous = store.head(conversation_id)
    for offset, event in enumerate(batch):
        event = event.model_copy(update={"parent_id": previous} if offset == 0 else {})
        with lock:
            sent_at[start_seq + 1 + offset] = time.time()
        store.append(conversation_id, event)
        previous = event.id
        if offset % 20 == 19:
            time.sleep(0.01)  # a live run appends in bursts, not all at once
    for thread in threads:
        thread.join(timeout=120)
    store.close()
    return {
        "fanout_subscribers": subscribers,
        "fanout_events": events,
        "fanout_latency_p50_s": _percentile(latencies, 0.5),
        "fanout_latency_p99_s": _percentile(latencies, 0.99),
    }


def _reconnect_catch_up(
    base_url: str, store_url: str, conversation_id: str, missed: int
) -> dict[str, Any]:
    store = open_store(store_url)
    after = store.get_conversation(conversation_id).event_count - 1
    batch = realistic_events(missed, seed=13)
    batch[0] = batch[0].model_copy(update={"parent_id": store.head(conversation_id)})
    for start in range(0, missed, 1000):
        store.append_batch(conversation_id, batch[start : start + 1000])
    store.close()
    url = (
        base_url.replace("http", "ws")
        + f"/api/conversations/{conversation_id}/events/stream?after_seq={after}&batch=true"
    )
    received = 0
    first_seq = None
    begin = time.perf_counter()
    with connect(url, max_size=2**26) as socket_:
        while received < missed:
            frame = json.loads(socket_.recv(timeout=60))
            for message in frame if isinstance(frame, list) else [frame]:
                if message["type"] == "event":
                    first_seq = message["seq"] if first_seq is None else first_seq
                    received += 1
    return {
        "reconnect_missed_events": missed,
        "reconnect_catch_up_s": time.perf_counter() - begin,
        "reconnect_events_received": received,
        "reconnect_first_seq_is_next": first_seq == after + 1,
    }


def _process(pid: int) -> dict[str, int]:
    """A process's threads, open fds and resident memory (KiB), from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {
        "threads": len(os.listdir(f"/proc/{pid}/task")),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "rss_kib": rss,
    }


def _stream_churn(server: ServerProcess, store_url: str, streams: int) -> dict[str, Any]:
    """Open and close ``streams`` streams, each on a conversation of its own (a hub each), a
    few at a time; the server's resources before, at the peak and once they have settled."""
    assert server.process is not None
    pid = server.process.pid
    store = open_store(store_url)
    warm_up = CHURN_AT_ONCE * 2
    ids = [store.create_conversation(title="churn").id for _ in range(warm_up + streams)]
    for conversation_id in ids:
        store.append(conversation_id, MessageEvent(source="user", text="hello"))
    store.close()
    base = server.base_url.replace("http", "ws")

    def open_one(conversation_id: str) -> Any:
        socket_ = connect(f"{base}/api/conversations/{conversation_id}/events/stream", legacy=True)
        socket_.recv(timeout=30)  # the replayed first event: the stream has joined its hub
        return socket_

    def churn(conversation_ids: list[str], peak: dict[str, int]) -> dict[str, int]:
        for start in range(0, len(conversation_ids), CHURN_AT_ONCE):
            sockets = list(pool.map(open_one, conversation_ids[start : start + CHURN_AT_ONCE]))
            peak = {name: max(value, peak[name]) for name, value in _process(pid).items()}
            for socket_ in sockets:
                socket_.close()
        return peak

    with ThreadPoolExecutor(CHURN_AT_ONCE) as pool:
        # A warm-up round on other conversations: the server's worker threads (a bounded
        # pool, each with its own store connection) that this concurrency needs exist before.
        churn(ids[:warm_up], _process(pid))
        time.sleep(1)  # the warm-up's hubs end within the store's poll interval
        before = _process(pid)
        peak = churn(ids[warm_up:], dict(before))
    deadline = time.monotonic() + 10  # a hub ends within its store's poll interval
    after = _process(pid)
    while time.monotonic() < deadline and (
        after["threads"] > before["threads"] or after["fds"] > before["fds"]
    ):
        time.sleep(0.1)
        after = _process(pid)
    figures: dict[str, Any] = {"streams_opened_and_closed": streams}
    for name, when in (("before", before), ("peak", peak), ("after", after)):
        figures[f"server_threads_{name}"] = when["threads"]
        figures[f"server_fds_{name}"] = when["fds"]
        figures[f"server_rss_mib_{name}"] = round(when["rss_kib"] / 1024, 1)
    return figures


def _run_at_once(client: TreadleClient, settings: ConversationSettings, count: int) -> float:
    """Seconds from starting ``count`` conversations' runs together until all have ended."""
    conversations = [client.create_conversation(settings) for _ in range(count)]
    for conversation in conversations:
        conversation.send_message("think it through")
    waiting = {conversation.id for conversation in conversations}
    begin = time.perf_counter()
    for conversation in conversations:
        while True:
            try:
                conversation.run(max_steps=CONCURRENT_STEPS + 5, wait=False)
                break
            except RemoteError as error:  # a server that caps concurrent runs: start it later
                if error.status != 429:
                    raise
                time.sleep(0.05)
    while waiting:
        time.sleep(0.05)  # one listing per poll: the waiting adds little load to the server
        listing = client.list_conversations(limit=1000).items
        waiting -= {
            item.id
            for item in listing
            if item.id in waiting and item.status != "running" and not item.running_here
        }
    return time.perf_counter() - begin


def _concurrency(server: ServerProcess, workspace: Path) -> dict[str, Any]:
    # Each step's tool takes 0.2 s of wall time (as a real tool or model would), so one run is
    # mostly waiting and the figure shows how much 50 at once slow each other down.
    steps = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": f"sleep 0.2; echo {i}"}}]}
        for i in range(CONCURRENT_STEPS)
    ]
    finish = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
    settings = ConversationSettings.scripted_inline([*steps, finish], workspace)
    with TreadleClient(server.base_url) as client:
        _run_at_once(client, settings, 1)  # warm-up: imports, caches, the first thread
        one = _run_at_once(client, settings, 1)
        fifty = _run_at_once(client, settings, 50)
    return {
        "concurrent_steps_per_conversation": CONCURRENT_STEPS + 1,
        "concurrent_1_s": round(one, 3),
        "concurrent_50_s": round(fifty, 3),
        "concurrent_50_vs_1": round(fifty / one, 2),
    }


def _timed_get(url: str, params: dict[str, Any] | None = None, runs: int = 20) -> float:
    """Median seconds of ``runs`` GETs of ``url`` (after one that warms caches)."""
    timings: list[float] = []
    with httpx.Client(timeout=300) as http:
        for run in range(runs + 1):
            begin = time.perf_counter()
            http.get(url, params=params).raise_for_status()
            if run:
                timings.append(time.perf_counter() - begin)
    return statistics.median(timings)


def branched_figures(
    base_url: str, conversation_id: str, store_url: str | None = None
) -> dict[str, float]:
    """The branch tree, the audit and a text search page (a needle of the workload's tool
    outputs) of one large branched conversation, over HTTP. The audit three ways: the first
    request of the server process (``audit_first_s``: with no audit checkpoint in the store
    yet it reads and walks the whole log, and keeps one),
    repeated with nothing appended (``audit_s``: the kept answer), and with 10 events appended
    through another store handle before each request (``audit_after_append_s``: the kept
    audit extended by 10 events)."""
    url = f"{base_url}/api/conversations/{conversation_id}"
    with httpx.Client(timeout=600) as http:
        begin = time.perf_counter()
        http.get(f"{url}/audit").raise_for_status()
        first = time.perf_counter() - begin
    figures = {
        "tree_s": _timed_get(f"{url}/tree"),
        "audit_first_s": first,
        "audit_s": _timed_get(f"{url}/audit"),
        "search_text_page_s": _timed_get(
            f"{url}/events", {"text": "needle-not-in-any-event", "limit": 50}
        ),
        "search_text_common_page_s": _timed_get(
            f"{url}/events", {"text": "exit_code", "limit": 50}
        ),
    }
    if store_url is not None:
        figures["audit_after_append_s"] = _audit_after_appends(url, store_url, conversation_id)
    return figures


def fresh_process_audit(store_url: str, workspace: Path, conversation_id: str) -> dict[str, float]:
    """The first ``GET /audit`` of the conversation in a fresh ``treadle serve`` once an
    earlier server audited it (``audit_first_fresh_s``): the new process restores the store's
    audit checkpoint (store/audit_summary.py) and walks only the events after it; and the
    same after 1,000 more events appended by another store handle
    (``audit_first_fresh_tail_s``: a tail of 1,000 past the checkpoint)."""
    figures: dict[str, float] = {}
    for name in ("audit_first_fresh_s", "audit_first_fresh_tail_s"):
        if name == "audit_first_fresh_tail_s":
            store = open_store(store_url)
            try:
                batch = realistic_events(1000, seed=99)
                head = store.head(conversation_id)
                batch[0] = batch[0].model_copy(update={"parent_id": head})
                for start in range(0, len(batch), 10):  # live appends, not one bulk import
                    store.append_batch(conversation_id, batch[start : start + 10])
            finally:
                store.close()
        server = ServerProcess(store_url.split("?")[0], workspace_root=workspace).start()
        try:
            url = f"{server.base_url}/api/conversations/{conversation_id}/audit"
            with httpx.Client(timeout=600) as http:
                begin = time.perf_counter()
                http.get(url).raise_for_status()
                figures[name] = time.perf_counter() - begin
        finally:
            server.stop()
    return figures


def _audit_after_appends(url: str, store_url: str, conversation_id: str, runs: int = 7) -> float:
    store = open_store(store_url)
    timings: list[float] = []
    try:
        with httpx.Client(timeout=300) as http:
            for run in range(runs):
                batch = realistic_events(10, seed=100 + run)
                batch[0] = batch[0].model_copy(update={"parent_id": store.head(conversation_id)})
                store.append_batch(conversation_id, batch)
                begin = time.perf_counter()
                http.get(f"{url}/audit").raise_for_status()
                timings.append(time.perf_counter() - begin)
    finally:
        store.close()
    return statistics.median(timings)


def run_server_bench(
    events: int = 100_000,
    subscribers: int = 50,
    fanout: int = 1000,
    missed: int = 10_000,
    streams: int = 200,
    branched_events: int = 100_000,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="treadle-bench-server-") as tmp:
        store_url = f"sqlite:///{Path(tmp) / 'server.db'}?durability=fast"
        store = open_store(store_url)
        conversation_id = store.create_conversation(title="bench").id
        log = realistic_events(events)
        for start in range(0, events, 2000):
            store.append_batch(conversation_id, log[start : start + 2000])
        # the Canvas floors' large conversation: a main chain with 49 side branches (50 heads)
        build_conversation(store, "branched", branched_events, seed=4, forks=49)
        text_index = catch_up_text_index(store)
        store.close()
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        server = ServerProcess(store_url.split("?")[0], workspace_root=workspace).start()
        try:
            figures: dict[str, Any] = {"events": events, "branched_events": branched_events}
            figures.update(text_index)
            assert server.process is not None
            rss_before = _process(server.process.pid)["rss_kib"]
            figures.update(branched_figures(server.base_url, "branched", store_url))
            figures.update(fresh_process_audit(store_url, workspace, "branched"))
            # what the kept audit of the branched conversation (and its reads) added
            figures["audit_rss_added_mib"] = round(
                (_process(server.process.pid)["rss_kib"] - rss_before) / 1024, 1
            )
            figures.update(_search_pages(server.base_url, conversation_id, 400))
            figures.update(
                _fan_out(server.base_url, store_url, conversation_id, subscribers, fanout)
            )
            figures.update(_reconnect_catch_up(server.base_url, store_url, conversation_id, missed))
            figures.update(_stream_churn(server, store_url, streams))
            figures.update(_concurrency(server, workspace))
            # The OpenHands SDK's routes beside Treadle's own (bench/openhands.py).
            figures.update(openhands_figures(server.base_url, store_url, workspace))
            figures["search_page_p99_ms"] = round(figures["search_page_p99_s"] * 1000, 2)
            figures["fanout_latency_p99_ms"] = round(figures["fanout_latency_p99_s"] * 1000, 2)
        finally:
            server.stop()
    return figures
