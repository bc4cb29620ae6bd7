"""``treadle bench server``: the agent server over HTTP and WebSocket at 100,000 stored events.

A real ``treadle serve`` child process on 127.0.0.1: search pages of 100 (p50/p99), live
fan-out of 1,000 events to 50 WebSocket subscribers (delivery latency), and a reconnect after
10,000 missed events (it must catch up without re-reading older events).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from treadle.bench.workload import realistic_events
from treadle.server.process import ServerProcess
from treadle.store.urls import open_store


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _search_pages(base_url: str, conversation_id: str, requests: int) -> dict[str, float]:
    url = f"{base_url}/api/conversations/{conversation_id}/events"
    filters = [
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


def run_server_bench(
    events: int = 100_000, subscribers: int = 50, fanout: int = 1000, missed: int = 10_000
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="treadle-bench-server-") as tmp:
        store_url = f"sqlite:///{Path(tmp) / 'server.db'}?durability=fast"
        store = open_store(store_url)
        conversation_id = store.create_conversation(title="bench").id
        log = realistic_events(events)
        for start in range(0, events, 2000):
            store.append_batch(conversation_id, log[start : start + 2000])
        store.close()
        server = ServerProcess(store_url.split("?")[0]).start()
        try:
            figures: dict[str, Any] = {"events": events}
            figures.update(_search_pages(server.base_url, conversation_id, 400))
            figures.update(
                _fan_out(server.base_url, store_url, conversation_id, subscribers, fanout)
            )
            figures.update(_reconnect_catch_up(server.base_url, store_url, conversation_id, missed))
            figures["search_page_p99_ms"] = round(figures["search_page_p99_s"] * 1000, 2)
            figures["fanout_latency_p99_ms"] = round(figures["fanout_latency_p99_s"] * 1000, 2)
        finally:
            server.stop()
    return figures
