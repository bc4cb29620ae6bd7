"""``treadle bench canvas`` runs end to end at a small size and reports every figure issue 7 names
(the figures are read by people, never asserted: the machine is shared)."""

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
}


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
