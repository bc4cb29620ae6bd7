"""Two evals side by side (``treadle eval compare A B``): per task, where they differ (passed
in one, failed in the other, and why), each pass rate with its standard error, the paired
difference over the tasks both ran (its mean and standard error), tokens, cost and time."""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.eval.report import standard_error


def _per_task(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each task's share of passed epochs, and the status and reason of its first failure."""
    tasks: dict[str, dict[str, Any]] = {}
    for result in report["results"]:
        entry = tasks.setdefault(
            result["task_id"], {"passed": 0, "epochs": 0, "status": None, "reason": None}
        )
        entry["epochs"] += 1
        entry["passed"] += 1 if result["passed"] else 0
        if not result["passed"] and entry["status"] is None:
            entry["status"] = result["status"]
            entry["reason"] = result.get("reason")
    for entry in tasks.values():
        entry["share"] = entry["passed"] / entry["epochs"]
        if entry["status"] is None:
            entry["status"] = "passed"
    return tasks


def _side(report: dict[str, Any]) -> dict[str, Any]:
    summary = report["summary"]
    return {
        "eval_id": report["eval_id"],
        "model": report.get("model"),
        "tasks": summary["tasks"],
        "epochs": summary.get("epochs", 1),
        "pass_rate": summary["pass_rate"],
        "stderr": summary.get("stderr", 0.0),
        "tokens": summary["tokens"],
        "cost_usd": summary["cost_usd"],
        "seconds": summary["seconds"],
    }


def compare_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The comparison of eval ``a`` with eval ``b`` (see the module docstring)."""
    tasks_a, tasks_b = _per_task(a), _per_task(b)
    common = [task for task in tasks_a if task in tasks_b]
    differences = []
    for task in common:
        one, other = tasks_a[task], tasks_b[task]
        if one["share"] != other["share"]:
            differences.append(
                {
                    "task_id": task,
                    "change": "passed in A, failed in B"
                    if one["share"] > other["share"]
                    else "failed in A, passed in B",
                    "a": {k: one[k] for k in ("share", "status", "reason")},
                    "b": {k: other[k] for k in ("share", "status", "reason")},
                }
            )
    deltas = [tasks_a[task]["share"] - tasks_b[task]["share"] for task in common]
    return {
        "a": _side(a),
        "b": _side(b),
        "common_tasks": len(common),
        "only_in_a": [task for task in tasks_a if task not in tasks_b],
        "only_in_b": [task for task in tasks_b if task not in tasks_a],
        "paired_difference": {
            "mean": round(statistics.fmean(deltas), 4) if deltas else 0.0,
            "stderr": round(standard_error(deltas), 4),
            "tasks": len(deltas),
        },
        "differences": differences,
    }


def print_comparison(console: Console, comparison: dict[str, Any]) -> None:
    a, b = comparison["a"], comparison["b"]
    table = Table(title=f"A {a['eval_id']} vs B {b['eval_id']}", title_justify="left")
    for name in ("task", "change", "A", "B", "why"):
        table.add_column(name)
    for diff in comparison["differences"]:
        failed = diff["b"] if diff["change"].startswith("passed in A") else diff["a"]
        table.add_row(
            escape(diff["task_id"]),
            diff["change"],
            f"{diff['a']['share']:.0%} {escape(diff['a']['status'])}",
            f"{diff['b']['share']:.0%} {escape(diff['b']['status'])}",
            escape(" ".join(str(failed["reason"] or "").split())[:200]),
        )
    console.print(table)
    for name, side in (("A", a), ("B", b)):
        console.print(
            f"{name} {escape(side['eval_id'])} ({escape(str(side['model']))}): pass@1 "
            f"{side['pass_rate']:.1%} ± {side['stderr']:.1%} over {side['tasks']} tasks "
            f"x {side['epochs']}; {side['tokens']} tokens, ${side['cost_usd']:.4f}, "
            f"{side['seconds']:.1f} s"
        )
    paired = comparison["paired_difference"]
    console.print(
        f"paired difference A - B: {paired['mean']:+.1%} ± {paired['stderr']:.1%} over "
        f"{paired['tasks']} common tasks; {len(comparison['differences'])} differ"
        + (f"; only in A: {len(comparison['only_in_a'])}" if comparison["only_in_a"] else "")
        + (f"; only in B: {len(comparison['only_in_b'])}" if comparison["only_in_b"] else "")
    )
