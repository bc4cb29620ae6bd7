"""``treadle bench core``: the pure core's speed on parsed events, as seconds and as ratios.

Each figure is also given as a ratio to ``json.loads`` of the same events in the same run,
so runs on a noisy shared machine stay comparable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from treadle.bench.workload import light_chain, realistic_events
from treadle.events.audit import audit_events
from treadle.events.model import event_from_json, event_to_json
from treadle.events.projection import project_messages
from treadle.events.tree import EventTree

SDK_EVENTS_TO_MESSAGES_S_AT_20K = 0.47
"""openhands-sdk 1.58.2 events_to_messages on 20,000 events, measured on this machine (the projection speed floor compares with it)."""


def best_of(repeats: int, run: Callable[[], Any]) -> float:
    """The fastest of ``repeats`` runs: the least disturbed by the machine's other work."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def run_core_bench(events: int = 20_000, repeats: int = 3) -> dict[str, Any]:
    """Projection of an ``events``-long path, audit of 5x that, window of 50 on a 50x chain."""
    audit_size = events * 5
    chain_size = events * 50
    log = realistic_events(audit_size)
    path = log[:events]
    path_lines = [event_to_json(event) for event in path]
    log_lines = [event_to_json(event) for event in log]

    json_loads_s = best_of(repeats, lambda: [json.loads(line) for line in path_lines])
    json_loads_audit_s = best_of(1, lambda: [json.loads(line) for line in log_lines])
    parse_s = best_of(1, lambda: [event_from_json(line) for line in path_lines])
    projection_s = best_of(repeats, lambda: project_messages(path))
    audit_s = best_of(repeats, lambda: audit_events(log))

    chain = light_chain(chain_size)
    index_start = time.perf_counter()
    tree = EventTree(chain)
    index_s = time.perf_counter() - index_start
    head = chain[-1].id
    window_runs = 200
    path_window_s = best_of(
        3, lambda: [tree.path_to_root(head, limit=50) for _ in range(window_runs)]
    )
    path_window_s /= window_runs

    return {
        "events": events,
        "bytes_per_event": round(sum(map(len, path_lines)) / len(path_lines)),
        "json_loads_s": json_loads_s,
        "parse_s": parse_s,
        "projection_s": projection_s,
        "projection_vs_json_loads": projection_s / json_loads_s,
        "projection_vs_sdk": projection_s / SDK_EVENTS_TO_MESSAGES_S_AT_20K * (20_000 / events),
        "audit_events": audit_size,
        "audit_s": audit_s,
        "json_loads_audit_s": json_loads_audit_s,
        "audit_vs_json_loads": audit_s / json_loads_audit_s,
        "chain_events": chain_size,
        "tree_index_s": index_s,
        "path_window_s": path_window_s,
        "path_window_vs_json_loads_per_event": path_window_s / (json_loads_s / events),
    }
