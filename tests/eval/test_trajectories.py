"""An eval's trajectories are replayable (issue 24): its conversations keep workspace
snapshots (the starting files first), so `treadle diff` shows what the agent changed and
`treadle replay --mode rerun` reruns it with no hand-made workspace (both exited 2 before:
snapshots were off in evals)."""

from __future__ import annotations

import json

from support.cli import invoke_treadle
from support.eval_tasks import FINISH, bash, edit
from treadle.data.settings import ModelChoice
from treadle.eval.runner import TaskJob, run_task_attempt
from treadle.eval.tasks import EvalTask
from treadle.store.urls import open_store


def test_an_eval_conversation_can_be_diffed_and_rerun(tmp_path):
    start = tmp_path / "start"
    start.mkdir()
    (start / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    script = [edit("calc.py", "a - b", "a + b"), bash("cat calc.py"), FINISH]
    task = EvalTask(
        id="t",
        instruction="fix add",
        workspace=str(start),
        verify="grep -q 'a + b' calc.py",
        model=ModelChoice(kind="scripted", responses=script),
    )
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = run_task_attempt(
        TaskJob("e1", task, 1, "conv-1", url, task.model, work_dir=str(tmp_path / "w"))  # type: ignore[arg-type]
    )
    assert result["passed"] is True
    store = open_store(url)
    try:
        events = list(store.path_to_root("conv-1"))  # root first
    finally:
        store.close()
    first, last = events[0].id, events[-1].id
    diff = invoke_treadle("diff", "conv-1", first, last, "--store", url)
    assert diff.returncode == 0, diff.stderr
    assert "-    return a - b\n+    return a + b" in diff.stdout
    rerun = invoke_treadle("replay", "conv-1", "--mode", "rerun", "--store", url, "--json",
                        "--into", str(tmp_path / "again"))  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr + rerun.stdout
    report = json.loads(rerun.stdout)
    assert report["same"] is True
    assert (tmp_path / "again" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
