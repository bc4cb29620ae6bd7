"""``treadle bench eval`` runs end to end at a small size and reports every figure (timings are
read by people, never asserted: the machine is shared)."""

from __future__ import annotations

import json

from support.cli import run_treadle


def test_bench_eval_json_has_every_figure():
    done = run_treadle(
        "bench", "eval", "--tasks", "10", "--steps", "3", "--model-delay", "0.05",
        "--workers", "1,4", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    for count in (1, 4):
        assert figures[f"n{count}_tasks"] == 10
        assert figures[f"n{count}_passed"] == 10
        for name in ("tasks_per_min", "overhead_s_per_task", "overhead_p90_s", "model_s_per_task"):
            assert figures[f"n{count}_{name}"] > 0, name
        assert figures[f"n{count}_model_s_per_task"] >= 3 * 0.05
    assert isinstance(figures["overhead_floor_ok"], bool)
    assert figures["n4_over_n1"] > 0
    assert isinstance(figures["scaling_floor_ok"], bool)
