"""``treadle bench canvas`` runs end to end at a small size and reports every figure issues 7 and
11 name (timings are read by people, never asserted: the machine is shared; the request count
to show a branched conversation with its Branches tab is a count, so it is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

REQUIRED = {
    "first_event_ms_100",
    "interactive_ms_100",
    "first_event_ms_400",
    "interactive_ms_400",
    "heap_mib_400",
    "dom_nodes_400",
    "older_page_ms_400",
    "open_canvas_requests",
    "open_canvas_static_requests",
}
MAX_OPEN_REQUESTS = 5  # issue 11: a conversation with its Branches tab in at most 5 API requests


def test_bench_canvas_json_has_every_figure() -> None:
    command = ["bench", "canvas", "--sizes", "100,400", "--runs", "1", "--json"]
    result = subprocess.run(
        [sys.executable, "-m", "treadle", *command],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert set(figures) >= REQUIRED
    assert figures["older_page_ms_400"] is not None  # 400 events: one older page at least
    # the branched conversation's tree was drawn, in one /tree request among at most 5
    assert figures["open_canvas_branches"] == 4
    paths = figures["open_canvas_api_paths"].split()
    assert paths.count("/api/conversations/ID/tree") == 1
    assert figures["open_canvas_requests"] == len(paths) <= MAX_OPEN_REQUESTS, paths
    assert figures["open_canvas_static_requests"] > 0  # the page and its modules, apart
