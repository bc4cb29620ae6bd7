"""Evals that can be trusted and compared (issue 24): each result records its environment;
the eval id covers the starting files' contents (changed files never resume an old eval);
--epochs runs each task K times (pass@1, pass@k, stderr) and a larger K later adds attempts;
`eval list`, `eval compare` and `eval export swebench` read the stored evals; a cost budget
with a model LiteLLM cannot price is refused before the run."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import pytest

from support.cli import invoke_treadle
from support.eval_tasks import EXPECTED, InProcessEngine, write_eval
from treadle import __version__
from treadle.eval.driver import EvalPlan, model_settings, run_eval
from treadle.eval.environment import inputs_digest
from treadle.eval.prices import PriceError, litellm_can_price, parse_prices, priced
from treadle.eval.report import eval_report
from treadle.eval.results import EvalMismatch
from treadle.eval.tasks import eval_id_for, read_task_file
from treadle.events.model import TokenUsage
from treadle.runtime.llm.base import ModelResponse
from treadle.store.eval_results import open_eval_results
from treadle.store.urls import open_store

BY_ID = {task.id: task for task in EXPECTED}


def plan_for(tasks_file: Path, url: str, eval_id: str | None = None, **fields: Any) -> EvalPlan:
    task_file = read_task_file(tasks_file)
    inputs, sources = inputs_digest(task_file)
    return EvalPlan(
        eval_id or eval_id_for(task_file, model_settings(None), inputs),
        task_file,
        None,
        url,
        inputs_sha256=inputs,
        sources=sources,
        **fields,
    )


def run(plan: EvalPlan) -> dict[str, Any]:
    store = open_store(plan.store_url)
    results = open_eval_results(plan.store_url)
    try:
        done = run_eval(plan, InProcessEngine(), results, store)
        return eval_report(done.record, done.tasks, done.skipped)
    finally:
        results.close()
        store.close()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_each_result_records_where_and_on_what_it_ran(tmp_path, url):
    tasks = write_eval(tmp_path, [BY_ID["sed-fix"], BY_ID["repo-fix"]])
    report = run(plan_for(tasks, url, max_steps=7))
    folder, repo = (result["environment"] for result in report["results"])
    for environment in (folder, repo):
        assert environment["treadle"] == __version__
        assert environment["python"] == platform.python_version()
        assert environment["os"] == platform.platform()
        assert environment["sandbox"]["sandbox"] == "bubblewrap"
        assert environment["sandbox"]["network"] == "off"
        assert environment["model"]["kind"] == "scripted"
        assert environment["max_steps"] == 7
        assert len(environment["starting_tree"]) == 40  # the starting files' git tree id
    assert len(folder["starting_files_sha256"]) == 64
    assert folder["commit"] is None
    assert len(repo["commit"]) == 40  # the resolved commit id, recorded by the worker
    assert repo["commit"] == json.loads(tasks.read_text().splitlines()[1])["commit"]


def test_changed_starting_files_never_resume_an_old_eval(tmp_path, url):
    tasks = write_eval(tmp_path, [BY_ID["sed-fix"], BY_ID["no-change"]])
    first = plan_for(tasks, url)
    assert run(first)["summary"]["passed"] == 1
    # The task file is unchanged; a starting file is not: before, the same id resumed and
    # reported the old results as this eval's.
    (tmp_path / "start" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    second = plan_for(tasks, url)
    assert second.eval_id != first.eval_id
    report = run(second)
    assert not any(result["skipped"] for result in report["results"])
    assert report["summary"]["passed"] == 2
    with pytest.raises(EvalMismatch, match="made from other starting or hidden files"):
        run(plan_for(tasks, url, eval_id=first.eval_id))


def test_epochs_give_one_result_per_attempt_and_a_larger_k_adds_attempts(tmp_path, url):
    tasks = write_eval(tmp_path, [BY_ID["sed-fix"], BY_ID["no-change"], BY_ID["wrong-fix"]])
    two = plan_for(tasks, url, epochs=2)
    report = run(two)
    assert [(r["task_id"], r["epoch"]) for r in report["results"]] == [
        ("sed-fix", 1), ("sed-fix", 2), ("no-change", 1), ("no-change", 2),
        ("wrong-fix", 1), ("wrong-fix", 2),
    ]  # fmt: skip
    summary = report["summary"]
    assert (summary["tasks"], summary["samples"], summary["epochs"]) == (3, 6, 2)
    assert summary["pass_rate"] == 0.3333
    assert summary["stderr"] == 0.3333  # stdev of (1, 0, 0) over sqrt(3)
    assert summary["pass_at_k"] == {"1": 0.3333, "2": 0.3333}
    # The same eval with K = 3: the id is the same, two epochs are skipped, one is added.
    three = plan_for(tasks, url, epochs=3)
    assert three.eval_id == two.eval_id
    again = run(three)
    assert sum(result["skipped"] for result in again["results"]) == 6
    assert again["summary"]["samples"] == 9


def test_list_compare_and_export_read_the_stored_evals(tmp_path, url):
    a_tasks = write_eval(tmp_path / "a", [BY_ID["sed-fix"], BY_ID["no-change"]])
    b_tasks = write_eval(tmp_path / "b", [BY_ID["wrong-fix"], BY_ID["no-change"]])
    # Same task ids in both: b's "wrong-fix" is named "sed-fix" so that they pair up.
    b_lines = b_tasks.read_text().replace('"wrong-fix"', '"sed-fix"')
    b_tasks.write_text(b_lines)
    run(plan_for(a_tasks, url, eval_id="eval-a"))
    run(plan_for(b_tasks, url, eval_id="eval-b"))
    listed = invoke_treadle("eval", "list", "--store", url, "--json")
    assert listed.returncode == 0, listed.stderr
    items = {item["eval_id"]: item for item in json.loads(listed.stdout)["items"]}
    assert set(items) == {"eval-a", "eval-b"}
    assert items["eval-a"]["summary"]["pass_rate"] == 0.5
    assert items["eval-a"]["model"] == "per task"
    compared = invoke_treadle("eval", "compare", "eval-a", "eval-b", "--store", url, "--json")
    assert compared.returncode == 0, compared.stderr
    comparison = json.loads(compared.stdout)
    assert comparison["a"]["pass_rate"] == 0.5
    assert comparison["b"]["pass_rate"] == 0.0
    assert comparison["paired_difference"] == {"mean": 0.5, "stderr": 0.5, "tasks": 2}
    (difference,) = comparison["differences"]
    assert difference["task_id"] == "sed-fix"
    assert difference["change"] == "passed in A, failed in B"
    assert difference["b"]["reason"] == "verify exited 1"
    table = invoke_treadle("eval", "compare", "eval-a", "eval-b", "--store", url, columns=200)
    assert "passed in A, failed in B" in table.stdout
    assert "paired difference A - B: +50.0% ± 50.0% over 2 common tasks" in table.stdout
    # At 80 columns the tables keep every id whole: eval ids, task ids, and each conversation
    # as the short prefix the other commands take.
    shown = invoke_treadle("eval", "list", "--store", url, columns=80)
    assert shown.returncode == 0, shown.stderr
    assert "…" not in shown.stdout
    assert "eval-a" in shown.stdout
    report = invoke_treadle("eval", "report", "eval-a", "--store", url, columns=80)
    assert report.returncode == 0, report.stderr
    assert "…" not in report.stdout
    first = json.loads(invoke_treadle("eval", "report", "eval-a", "--store", url, "--json").stdout)
    conversation = first["results"][0]["conversation_id"]
    row = next(line for line in report.stdout.splitlines() if "sed-fix" in line)
    short = row.split()[-1]
    assert conversation.startswith(short)
    assert invoke_treadle("log", short, "--store", url).returncode == 0
    missing = invoke_treadle("eval", "compare", "eval-a", "nope", "--store", url)
    assert missing.returncode == 2
    assert "no eval 'nope'" in missing.stderr
    exported = tmp_path / "preds.jsonl"
    done = invoke_treadle(
        "eval", "export", "swebench", "eval-a", "--store", url, "-o", str(exported)
    )
    assert done.returncode == 0, done.stderr
    predictions = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [p["instance_id"] for p in predictions] == ["sed-fix", "no-change"]
    assert predictions[0]["model_name_or_path"] == "per task"
    assert predictions[0]["model_patch"].startswith("diff --git a/calc.py b/calc.py")
    assert predictions[1]["model_patch"] == ""


def test_a_budget_with_a_model_litellm_cannot_price_is_refused_before_the_run(tmp_path):
    # Before: the cost read 0.0 for every call and --max-cost never triggered.
    tasks = write_eval(tmp_path, EXPECTED[:1])
    store = tmp_path / "store.db"
    args = ("eval", "run", str(tasks), "--store", f"sqlite:///{store}", "--max-cost", "0.5")
    unpriced = invoke_treadle(*args, "--model", "openai/treadle-unpriced-model")
    assert unpriced.returncode == 2
    assert "LiteLLM has no price for openai/treadle-unpriced-model" in unpriced.stderr
    assert "--price-per-mtok IN,OUT" in unpriced.stderr
    assert not store.exists()
    bad = invoke_treadle(*args, "--model", "m", "--price-per-mtok", "1")
    assert bad.returncode == 2
    assert "give IN,OUT" in bad.stderr


def test_prices_given_by_hand_price_what_litellm_cannot():
    assert litellm_can_price("gpt-4o-mini")
    assert not litellm_can_price("openai/treadle-unpriced-model")
    assert parse_prices("0.15,0.6") == (0.15, 0.6)
    for text in ("1", "a,b", "-1,2", "nan,1", "1,2,3"):
        with pytest.raises(PriceError):
            parse_prices(text)
    response = ModelResponse(
        id="r", usage=TokenUsage(model="m", prompt_tokens=2_000_000, completion_tokens=500_000)
    )
    assert priced(response, (0.15, 0.6)).usage.cost_usd == pytest.approx(0.6)
    already = ModelResponse(id="r", usage=TokenUsage(prompt_tokens=1, cost_usd=0.5))
    assert priced(already, (10.0, 10.0)).usage.cost_usd == 0.5
