"""An eval's report: the JSON document (the eval id, the engine, a summary and one result per
task, in the task file's order) and the table the terminal shows."""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.eval.results import EvalRecord, TaskRecord


def eval_report(
    record: EvalRecord, tasks: list[TaskRecord], skipped: set[str] | None = None
) -> dict[str, Any]:
    """The report of ``record`` from its task rows: one result per task and epoch, in the
    task file's order; ``skipped``: the samples a rerun found finished (``sample_key``). A task
    with no row yet shows as ``not_run``."""
    by_id: dict[str, list[TaskRecord]] = {}
    for task_row in tasks:
        by_id.setdefault(task_row.task_id, []).append(task_row)
    results = []
    for task_id in record.task_ids:
        rows: list[TaskRecord | None] = [
            *sorted(by_id.get(task_id, []), key=lambda stored: stored.epoch)
        ]
        for row in rows or [None]:
            stored = dict(row.result) if row is not None and row.result is not None else None
            result = stored if stored is not None else _no_result(task_id, row)
            epoch = 1 if row is None else row.epoch
            result["epoch"] = epoch
            key = task_id if epoch == 1 else f"{task_id}#{epoch}"
            result["skipped"] = key in (skipped or set())
            results.append(result)
    return {
        "eval_id": record.id,
        "model": model_name(record.settings),
        "engine": record.engine,
        "tasks_file": record.tasks_file,
        "inputs_sha256": record.inputs_sha256,
        "settings": record.settings,
        "summary": summary_of(results),
        "results": results,
    }


def model_name(settings: dict[str, Any]) -> str:
    """The eval's model as a short name (``per task`` when each task names its own)."""
    model = settings.get("model")
    if not isinstance(model, dict):
        return "per task"
    if model.get("kind") == "scripted":
        script = model.get("script")
        return f"scripted:{Path(script).name}" if isinstance(script, str) else "scripted"
    return str(model.get("model") or "?")


def _no_result(task_id: str, row: TaskRecord | None) -> dict[str, Any]:
    reason = "never run" if row is None else "an attempt is still running, or its run died"
    return {
        "task_id": task_id,
        "status": "not_run",
        "passed": False,
        "patch": "",
        "verify": None,
        "conversation_id": None if row is None else row.conversation_id,
        "steps": 0,
        "tokens": 0,
        "cost_usd": 0.0,
        "seconds": 0.0,
        "model_seconds": 0.0,
        "reason": reason,
        "attempts": 0 if row is None else row.attempts,
    }


def summary_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, and the pass rate as pass@1 (the mean over tasks of each task's share of
    passed epochs) with its standard error (``stderr``: the sample standard deviation of the
    tasks' shares over the square root of their number), pass@k for each k every task has
    epochs for (the unbiased estimator 1 - C(n-c, k) / C(n, k)), tokens, cost and time."""
    per_task: dict[str, list[bool]] = {}
    for result in results:
        per_task.setdefault(result["task_id"], []).append(bool(result["passed"]))
    shares = [sum(passes) / len(passes) for passes in per_task.values()]
    total = len(results)
    passed = sum(1 for result in results if result["passed"])
    not_run = sum(1 for result in results if result["status"] == "not_run")
    fewest = min((len(passes) for passes in per_task.values()), default=0)
    pass_at = {
        str(k): round(statistics.fmean(_pass_at_k(p, k) for p in per_task.values()), 4)
        for k in _ks(fewest)
    }
    return {
        "tasks": len(per_task),
        "samples": total,
        "epochs": max((len(passes) for passes in per_task.values()), default=0),
        "passed": passed,
        "failed": total - passed - not_run,
        "not_run": not_run,
        "pass_rate": round(statistics.fmean(shares), 4) if shares else 0.0,
        "stderr": round(standard_error(shares), 4),
        "pass_at_k": pass_at,
        "tokens": sum(result["tokens"] for result in results),
        "cost_usd": sum(result["cost_usd"] for result in results),
        "seconds": round(sum(result["seconds"] for result in results), 3),
    }


def standard_error(values: list[float]) -> float:
    """The standard error of the mean of ``values`` (0 with fewer than two)."""
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) / math.sqrt(len(values))


def _ks(fewest: int) -> list[int]:
    """The k of pass@k to report: 1, 2, 4, 8... up to the fewest epochs any task has, and it."""
    ks = []
    k = 1
    while k <= fewest:
        ks.append(k)
        k *= 2
    if fewest and fewest not in ks:
        ks.append(fewest)
    return ks


def _pass_at_k(passes: list[bool], k: int) -> float:
    n, c = len(passes), sum(passes)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def print_report(
    console: Console, report: dict[str, Any], shown_ids: Mapping[str, str] | None = None
) -> None:
    """The results as a table (the reason of every task not passed under it), then the pass
    rate with its standard error, cost and time. ``shown_ids``: each conversation id as the
    table shows it (its short unique prefix: ``cli/ids.py``); whole when not given."""
    shown_ids = shown_ids or {}
    epochs = report["summary"].get("epochs", 1) > 1
    # Fits 80 columns with every id whole: no vertical rules; why a task did not pass (its
    # verification's exit code among it) and how many attempts it took are said under it.
    table = Table(
        title=f"eval {report['eval_id']} · model {report.get('model', '?')}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    columns = [("task", "left")] + ([("epoch", "right")] if epochs else [])
    columns += [
        ("status", "left"),
        ("passed", "left"),
        ("steps", "right"),
        ("tokens", "right"),
        ("cost $", "right"),
        ("s", "right"),
        ("conversation", "left"),
    ]
    for name, justify in columns:
        # A task's and a conversation's ids whole (copied into the next command).
        whole = name in ("task", "conversation", "status")
        table.add_column(name, justify=justify, no_wrap=whole)  # type: ignore[arg-type]
    for result in report["results"]:
        cells = [escape(result["task_id"])]
        if epochs:
            cells.append(str(result.get("epoch", 1)))
        cells += [
            escape(result["status"]) + (" (skipped)" if result.get("skipped") else ""),
            "[green]yes[/]" if result["passed"] else "[red]no[/]",
            str(result["steps"]),
            str(result["tokens"]),
            f"{result['cost_usd']:.4f}",
            f"{result['seconds']:.1f}",
            escape(shown_ids.get(result["conversation_id"], result["conversation_id"]) or "-"),
        ]
        table.add_row(*cells)
    console.print(table)
    for result in report["results"]:
        attempts = result.get("attempts", 0)
        if result["passed"] and attempts <= 1:
            continue
        where = result["task_id"] + (f"#{result.get('epoch', 1)}" if epochs else "")
        facts = [result["status"]]
        if attempts > 1:
            facts.append(f"{attempts} attempts")
        said = f"  {escape(where)} ({escape(', '.join(facts))})"
        if not result["passed"]:
            said += f": {escape(_one_line(result.get('reason') or 'no reason recorded'))}"
        console.print(said)
    summary = report["summary"]
    engine = report["engine"]
    pass_at = summary.get("pass_at_k", {})
    more = "".join(f", pass@{k} {v:.0%}" for k, v in pass_at.items() if k != "1")
    console.print(
        f"passed {summary['passed']}/{summary.get('samples', summary['tasks'])} "
        f"(pass@1 {summary['pass_rate']:.1%} ± {summary.get('stderr', 0.0):.1%}{more}), "
        f"failed {summary['failed']}, not run {summary['not_run']}; "
        f"cost ${summary['cost_usd']:.4f}, {summary['tokens']} tokens, "
        f"{summary['seconds']:.1f} s of task time; engine {engine.get('name')} "
        f"({engine.get('address')}, {engine.get('workers')} workers)"
    )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def report_path_problem(path: Path) -> str | None:
    """Why the report cannot be written to ``path`` (checked before an eval runs, so that a
    long eval does not end in a write that fails), or None."""
    if path.is_dir():
        return f"-o {path}: a folder, not a file for the report"
    if not path.parent.is_dir():
        return f"-o {path}: no folder {path.parent}"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return f"-o {path}: folder {path.parent} is not writable"
    return None


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write ``report`` as JSON to ``path`` whole or not at all (``write_text_whole``)."""
    write_text_whole(path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")


def write_text_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a new file renamed over the old (a
    symlink at ``path`` is replaced, never written through)."""
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
