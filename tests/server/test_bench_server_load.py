"""``treadle bench server --conversations`` measures what it says: every conversation runs to
its finish through a real server and a model answering after a delay, the figures are there
for each count, and no process it started is left (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import host_pids_with
from treadle.bench.fake_provider import completion
from treadle.bench.server_load import STEPS, run_server_load_bench


def test_the_provider_answers_by_the_results_already_in_the_request() -> None:
    calls = [completion(done, 2)["choices"][0]["message"]["tool_calls"][0] for done in range(4)]
    names = [call["function"]["name"] for call in calls]
    assert names == ["terminal", "terminal", "finish", "finish"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"command": "echo step 1"}
    assert len({call["id"] for call in calls}) == 4  # unique, as a model's are


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")
def test_the_load_bench_runs_every_conversation_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    figures = run_server_load_bench([2], parent=tmp_path, split_conversations=2, split_rounds=1)
    assert figures["steps_per_conversation"] == STEPS
    for count in (1, 2):
        assert figures[f"n{count}_failed"] == 0
        assert figures[f"n{count}_refused"] == 0
        assert figures[f"n{count}_wall_s"] >= 0.5 * STEPS  # every step waited for the model
        assert figures[f"n{count}_server_cpu_ms_per_step"] > 0
        assert figures[f"n{count}_rss_peak_mib"] > 0
    assert figures["model_client_cpu_ms_per_call"] > 0
    # The split ran both kinds of conversation to their finish: a conversation's own cost
    # (at least its one model call's share of the server) and a terminal step's.
    assert figures["split_failed"] == 0
    assert (
        figures["split_conversation_treadle_cpu_ms"] + figures["model_client_cpu_ms_per_call"] > 0
    )
    # The server (its store's path) and both providers (their tag) named the run's folder.
    assert host_pids_with(str(tmp_path)) == []


@pytest.mark.parametrize("given", ["0", "1,x", "5000"])
def test_a_bad_count_is_a_usage_error_naming_it(given: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "treadle", "bench", "server", "--conversations", given],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--conversations" in done.stderr
