"""``treadle bench mcp`` measures what it says: both kinds of start and the call round trip, with
every server it started stopped afterwards (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.processes import host_pids_with
from treadle.bench.mcp import run_mcp_bench


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")
def test_the_bench_reports_its_figures_and_leaves_no_server_running() -> None:
    figures = run_mcp_bench(starts=1, calls=10)
    assert set(figures) == {"starts", "calls", "mcp_start_s", "sandbox_mcp_start_s", "mcp_call_s"}
    assert figures["mcp_start_s"] > 0
    assert figures["sandbox_mcp_start_s"] > 0
    assert figures["mcp_call_s"] > 0
    assert host_pids_with("treadle-bench-mcp-") == []
