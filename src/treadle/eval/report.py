"""An eval's report: the JSON document (the eval id, the engine, a summary and one result per
task, in the task file's order) and the table the terminal shows."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.eval.results import EvalRecord, TaskRecord


def eval_report(
    record: EvalRecord, tasks: list[TaskRecord], skipped: set[str] | None = None
) -> dict[str, Any]:
    """The report of ``record`` from its task rows; ``skipped``: the tasks a rerun found
    finished (their ``skipped`` is true). A task with no row yet shows as ``not_run``."""
    by_id = {row.task_id: row for row in tasks}
    results = []
    for task_id in record.task_ids:
        row = by_id.get(task_id)
        result = dict(row.result) if row is not None and row.result is not None else None
        if result is None:
            result = _no_result(task_id, row)
        result["skipped"] = task_id in (skipped or set())
        results.append(result)
    return {
        "eval_id": record.id,
        "engine": record.engine,
        "tasks_file": record.tasks_file,
        "settings": record.settings,
        "summary": summary_of(results),
        "results": results,
    }


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
    total = len(results)
    passed = sum(1 for result in results if result["passed"])
    not_run = sum(1 for result in results if result["status"] == "not_run")
    return {
        "tasks": total,
        "passed": passed,
        "failed": total - passed - not_run,
        "not_run": not_run,
        "pass_rate": round(passed / total, 4) if total else 0.0,
        "tokens": sum(result["tokens"] for result in results),
        "cost_usd": sum(result["cost_usd"] for result in results),
        "seconds": round(sum(result["seconds"] for result in results), 3),
    }


def print_report(console: Console, report: dict[str, Any]) -> None:
    """The results as a table, then the pass rate, cost and time."""
    table = Table(title=f"eval {report['eval_id']}", title_justify="left")
    for name, justify in (
        ("task", "left"),
        ("status", "left"),
        ("passed", "left"),
        ("verify", "right"),
        ("steps", "right"),
        ("tokens", "right"),
        ("cost $", "right"),
        ("s", "right"),
        ("attempts", "right"),
        ("conversation", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for result in report["results"]:
        verify = result["verify"]
        table.add_row(
            escape(result["task_id"]),
            escape(result["status"]) + (" (skipped)" if result.get("skipped") else ""),
            "[green]yes[/]" if result["passed"] else "[red]no[/]",
            "-" if verify is None else str(verify["exit_code"]),
            str(result["steps"]),
            str(result["tokens"]),
            f"{result['cost_usd']:.4f}",
            f"{result['seconds']:.1f}",
            str(result.get("attempts", 0)),
            escape(result["conversation_id"] or "-"),
        )
    console.print(table)
    summary = report["summary"]
    engine = report["engine"]
    console.print(
        f"passed {summary['passed']}/{summary['tasks']} ({summary['pass_rate']:.0%}), "
        f"failed {summary['failed']}, not run {summary['not_run']}; "
        f"cost ${summary['cost_usd']:.4f}, {summary['tokens']} tokens, "
        f"{summary['seconds']:.1f} s of task time; engine {engine.get('name')} "
        f"({engine.get('address')}, {engine.get('workers')} workers)"
    )


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
    """Write ``report`` as JSON to ``path`` whole or not at all: a new file renamed over the old
    (a symlink at ``path`` is replaced, never written through)."""
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
