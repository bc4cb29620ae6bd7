"""examples/eval runs offline with ``treadle eval run`` and gives what its README says."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_treadle

EXAMPLE = Path(__file__).parents[2] / "examples" / "eval" / "tasks.jsonl"


def test_the_example_eval_gives_what_its_readme_says(tmp_path):
    report_path = tmp_path / "report.json"
    done = run_treadle(
        "eval", "run", str(EXAMPLE), "--store", f"sqlite:///{tmp_path / 'store.db'}",
        "-o", str(report_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = {r["task_id"]: r for r in json.loads(report_path.read_text())["results"]}
    assert {task: (r["status"], r["passed"]) for task, r in results.items()} == {
        "fix-add": ("finished", True),
        "empty-mean": ("finished", True),
        "wrong-fix": ("finished", False),
        "model-gives-up": ("error", False),
    }
    for task in ("fix-add", "empty-mean", "wrong-fix"):
        # Only the agent's change: the setup's test file is a starting file, caches are ignored.
        assert results[task]["patch"].startswith("diff --git a/calc.py b/calc.py\n")
        assert results[task]["patch"].count("diff --git") == 1
    assert results["model-gives-up"]["patch"] == ""
    assert "passed 2/4 (pass@1 50.0% ± 28.9%" in done.stdout
    # The table names the model and says why each task not passed did not.
    assert "model per task" in done.stdout
    assert "wrong-fix (finished): verify exited 1" in done.stdout
    assert "model-gives-up (error): the conversation ended error" in done.stdout
