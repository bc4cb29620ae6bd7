"""``canvas_frame_server_s``: the server's time per live update of the Canvas at 15,000 events,
now a frame's transcript updates made once per event for every listener
(``server.stream.frame_texts``, ``events.view.TranscriptFollower``), against the refetch of the
transcript's tail each frame used to ask for (``runtime.transcript.transcript_page``, 60 items:
what ``GET .../transcript?limit=60`` computes)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from treadle.bench.workload import realistic_events
from treadle.runtime.transcript import transcript_page
from treadle.server.stream import frame_texts, seeded_state
from treadle.store.urls import open_store

REFETCHED_ITEMS = 60
"""The tail the Canvas refetched for each live frame before frames carried their updates."""


def run_live_view_bench(
    events: int = 15_000, live: int = 300, refetches: int = 15
) -> dict[str, Any]:
    """Fill a SQLite log with ``events`` realistic events, then append ``live`` more one by
    one, timing each one's frames from a stream state seeded at the end of the fill; and time
    ``refetches`` reads of the transcript's tail."""
    chain = realistic_events(events + live)
    with tempfile.TemporaryDirectory(prefix="treadle-bench-live-") as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'live.db'}")
        try:
            cid = store.create_conversation(title="live view").id
            store.append_batch(cid, chain[:events])
            refetch = []
            for _ in range(refetches):
                started = time.perf_counter()
                transcript_page(store, cid, limit=REFETCHED_ITEMS)
                refetch.append(time.perf_counter() - started)
            state = seeded_state(store, cid, events - 1)
            frames = []
            for event in chain[events:]:
                seq = store.append(cid, event)
                (stored,) = store.get_range(cid, seq, seq + 1)
                started = time.perf_counter()
                frame_texts(stored, state)
                frames.append(time.perf_counter() - started)
        finally:
            store.close()
    frame_s = statistics.median(frames)
    refetch_s = statistics.median(refetch)
    return {
        "canvas_frame_events": events,
        "canvas_frame_server_s": frame_s,
        "canvas_frame_server_p95_s": sorted(frames)[int(len(frames) * 0.95) - 1],
        "canvas_refetch_server_s": refetch_s,
        "canvas_refetch_vs_frame_ratio": refetch_s / frame_s,
    }
