"""``treadle bench eval``: an eval's throughput on the local Ray at N = 1, 2, 4 workers, and
Treadle's own overhead per task (a task's wall time minus its model's time).

Each task is a 5-step scripted conversation (file edits, sandboxed commands, finish) on a
small workspace, its model stub answering in 200 ms; setup, baseline, snapshots, patch, the
clean checkout with the task's hidden files, and verify there run as in any eval. The floors
of evals: overhead <= 1 s per task, and N = 4 at least 3x the tasks per minute of N = 1
(model-bound work scales past the cores).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from treadle.data.settings import SandboxSettings
from treadle.eval.driver import EvalPlan, run_eval
from treadle.eval.ray_engine import RayEngine
from treadle.eval.tasks import read_task_file
from treadle.store.eval_results import open_eval_results
from treadle.store.urls import open_store

OVERHEAD_FLOOR_S = 1.0
SCALING_FLOOR = 3.0


def _script(steps: int) -> list[dict[str, Any]]:
    """``steps`` model responses: tool calls alternating between the file editor and the
    sandboxed terminal, then finish."""
    calls: list[dict[str, Any]] = []
    for number in range(steps - 1):
        if number % 2 == 0:
            arguments = {
                "command": "create",
                "path": f"notes/step{number}.txt",
                "file_text": f"step {number}\n",
            }
            calls.append({"name": "file_editor", "arguments": arguments})
        else:
            command = f"cat notes/step{number - 1}.txt >> log.txt && wc -l log.txt"
            calls.append({"name": "terminal", "arguments": {"command": command}})
    calls.append({"name": "finish", "arguments": {"message": "done"}})
    return [{"tool_calls": [call]} for call in calls]


def _write_tasks(folder: Path, tasks: int, steps: int) -> Path:
    start = folder / "start"
    start.mkdir()
    (start / "README.md").write_text("A workspace for the eval bench.\n")
    (start / "src").mkdir()
    for number in range(20):
        (start / "src" / f"module{number}.py").write_text(f"VALUE = {number}\n" * 20)
    # Hidden files laid over the clean checkout before verify, as a scored task has them.
    hidden = folder / "hidden"
    hidden.mkdir()
    (hidden / "check_notes.sh").write_text("test -s log.txt && grep -q 'step 0' log.txt\n")
    model = {"kind": "scripted", "responses": _script(steps)}
    path = folder / "tasks.jsonl"
    with path.open("w") as file:
        for number in range(tasks):
            task = {
                "id": f"task-{number:04d}",
                "instruction": "Take notes.",
                "workspace": "start",
                "verify": "sh check_notes.sh",
                "hidden_files": "hidden",
                "model": model,
            }
            file.write(json.dumps(task) + "\n")
    return path


def _one_run(folder: Path, tasks_file: Path, workers: int, delay_s: float) -> dict[str, Any]:
    url = f"sqlite:///{folder / f'store-{workers}.db'}"
    store = open_store(url)
    results = open_eval_results(url)
    plan = EvalPlan(
        eval_id=f"bench-{workers}",
        task_file=read_task_file(tasks_file),
        model=None,
        store_url=url,
        sandbox=SandboxSettings(),
        retries=0,
        work_dir=str(folder / "work"),
        model_delay_s=delay_s,
    )
    first_submit: list[float] = []
    try:
        with RayEngine(workers) as engine:

            def tell(_task: str, what: str) -> None:
                if what in ("passed", "failed") and not first_submit:
                    first_submit.append(time.monotonic())

            started = time.monotonic()
            run = run_eval(plan, engine, results, store, tell)
            ended = time.monotonic()
    finally:
        results.close()
        store.close()
    done = [row.result for row in run.tasks if row.state == "done" and row.result]
    overheads = [result["seconds"] - result["model_seconds"] for result in done]
    # Ray's start is paid once per eval: throughput is measured from the first result on,
    # over the tasks that ended after it.
    steady = ended - first_submit[0] if first_submit else ended - started
    return {
        "tasks": len(done),
        "passed": sum(1 for result in done if result["passed"]),
        "wall_s": round(ended - started, 2),
        "tasks_per_min": round((len(done) - 1) / steady * 60, 1) if steady > 0 else None,
        "overhead_s_per_task": round(statistics.fmean(overheads), 3) if overheads else None,
        "overhead_p90_s": round(statistics.quantiles(overheads, n=10)[-1], 3)
        if len(overheads) >= 10
        else None,
        "model_s_per_task": round(statistics.fmean(r["model_seconds"] for r in done), 3)
        if done
        else None,
    }


def run_eval_bench(
    tasks: int = 100,
    steps: int = 5,
    delay_s: float = 0.2,
    workers: tuple[int, ...] = (1, 2, 4),
) -> dict[str, Any]:
    """The figures of each N, then the floors."""
    folder = Path(tempfile.mkdtemp(prefix="treadle-bench-eval-"))
    figures: dict[str, Any] = {"tasks": tasks, "steps": steps, "model_delay_s": delay_s}
    try:
        tasks_file = _write_tasks(folder, tasks, steps)
        for count in workers:
            for name, value in _one_run(folder, tasks_file, count, delay_s).items():
                figures[f"n{count}_{name}"] = value
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    overheads = [figures.get(f"n{count}_overhead_s_per_task") for count in workers]
    worst = max((value for value in overheads if value is not None), default=None)
    figures["overhead_s_per_task_worst"] = worst
    figures["overhead_floor_ok"] = worst is not None and worst <= OVERHEAD_FLOOR_S
    one, four = figures.get("n1_tasks_per_min"), figures.get("n4_tasks_per_min")
    if one and four:
        figures["n4_over_n1"] = round(four / one, 2)
        figures["scaling_floor_ok"] = four / one >= SCALING_FLOOR
    return figures
