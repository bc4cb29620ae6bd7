"""``treadle bench replay``: a real recorded replay timed, every replay the same."""

from __future__ import annotations

import json

from support.cli import run_treadle


def test_bench_replay_times_a_replay_that_comes_out_the_same():
    result = run_treadle("bench", "replay", "--steps", "3", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["steps"] == 4  # three think calls and the finish
    assert figures["events"] == 10  # system prompt, message, 4 x (action, observation)
    assert 0 < figures["replay_s"] < 60
    assert figures["replay_per_event_s"] == figures["replay_s"] / figures["events"]
