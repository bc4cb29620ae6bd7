"""``treadle bench store`` runs end to end at its smallest size and reports every figure issue 3
names (the figures themselves are read by people, never asserted: the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

REQUIRED = {
    "backend",
    "events",
    "append_durable_per_s",
    "append_fast_per_s",
    "raw_sqlite_durable_per_s",
    "append_durable_8_writers_per_s",
    "raw_sqlite_fast_per_s",
    "append_growth_ratio",
    "open_and_window_s",
    "full_path_s",
    "search_page_s",
    "rss_mib",
    "disk_bytes_per_event",
}


@pytest.mark.slow
def test_bench_store_json_has_every_figure(tmp_path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "treadle",
            "bench",
            "store",
            "--events",
            "10000",
            "--store",
            f"sqlite:///{tmp_path / 'bench'}",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert set(figures) >= REQUIRED
    assert figures["backend"] == "sqlite"
    assert figures["events"] == 10_000
    assert all(figures[name] is not None and figures[name] > 0 for name in REQUIRED - {"backend"})
    assert (tmp_path / "bench").is_dir(), "the bench wrote where --store said"
    assert list((tmp_path / "bench").iterdir()) == [], "and removed its files"
