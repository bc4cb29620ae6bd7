"""SWE-bench's formats (issue 24): instances read with --format swebench (FAIL_TO_PASS and
PASS_TO_PASS as the JSON strings SWE-bench stores, repositories from --repos DIR), scored as
its harness does (the patch on a clean checkout of base_commit, then the hidden test_patch,
then the listed tests); predictions written for its harness. The example set of
examples/swebench/ is built by its script and gives what its README says."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from support.cli import invoke_treadle
from support.eval_tasks import InProcessEngine
from treadle.data.settings import SandboxSettings
from treadle.eval.driver import EvalPlan, run_eval
from treadle.eval.report import eval_report
from treadle.eval.swebench import predictions, read_swebench_file
from treadle.eval.tasks import TaskFileError
from treadle.store.eval_results import open_eval_results
from treadle.store.urls import open_store

EXAMPLE = Path(__file__).parents[2] / "examples" / "swebench"
PYTEST = f"{sys.executable} -m pytest -p no:cacheprovider"


def build_example(out: Path) -> Path:
    spec = importlib.util.spec_from_file_location("make_set", EXAMPLE / "make_set.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(out)


def test_the_example_set_is_scored_as_the_swebench_harness_would(tmp_path):
    instances = build_example(tmp_path / "set")
    task_file = read_swebench_file(instances, tmp_path / "set" / "repos", PYTEST)
    first = task_file.tasks[0]
    assert first.fail_to_pass == ("tests/test_add.py::test_add",)  # from a JSON string
    assert first.verify == PYTEST
    assert first.repo == str((tmp_path / "set/repos/treadle-examples/minicalc").resolve())
    url = f"sqlite:///{tmp_path / 'store.db'}"
    # The venv's pytest is not inside the sandbox: the example runs with --sandbox none.
    plan = EvalPlan("swe", task_file, None, url, sandbox=SandboxSettings(kind="none"))
    store, results = open_store(url), open_eval_results(url)
    try:
        run = run_eval(plan, InProcessEngine(), results, store)
        report = eval_report(run.record, run.tasks)
    finally:
        results.close()
        store.close()
    by_id = {result["task_id"]: result for result in report["results"]}
    assert {task: result["passed"] for task, result in by_id.items()} == {
        "minicalc-1": True,
        "minicalc-2": False,
        "minicalc-3": True,
        "minicalc-4": False,
    }, {task: result["reason"] for task, result in by_id.items()}
    assert by_id["minicalc-1"]["tests"] == {
        "fail_to_pass": {"tests/test_add.py::test_add": "PASSED"},
        "pass_to_pass": {"tests/test_basic.py::test_double": "PASSED"},
    }
    assert by_id["minicalc-2"]["reason"].startswith("the task's test_patch does not apply")
    assert "fastcalc/__init__.py" in by_id["minicalc-3"]["patch"]
    assert "build/ (ignored by the starting files' rules)" in by_id["minicalc-4"]["patch_left_out"]
    assert by_id["minicalc-4"]["tests"]["fail_to_pass"] == {"tests/test_add.py::test_add": "FAILED"}
    assert len(by_id["minicalc-1"]["environment"]["commit"]) == 40
    lines = predictions(report)
    assert [line["instance_id"] for line in lines] == [f"minicalc-{n}" for n in range(1, 5)]
    assert set(lines[0]) == {"instance_id", "model_name_or_path", "model_patch"}
    assert "tests/test_add.py" not in lines[0]["model_patch"]  # the hidden tests stay hidden


def test_bad_swebench_input_is_named(tmp_path):
    instances = build_example(tmp_path / "set")
    with pytest.raises(TaskFileError, match="needs --repos DIR"):
        read_swebench_file(instances, None, PYTEST)
    with pytest.raises(TaskFileError, match="no clone of treadle-examples/minicalc"):
        read_swebench_file(instances, tmp_path, PYTEST)
    line = json.loads(instances.read_text().splitlines()[0])
    for change, said in (
        ({"repo": "../x"}, "is not OWNER/NAME"),
        ({"FAIL_TO_PASS": "[oops"}, "FAIL_TO_PASS is not a JSON list"),
        ({"base_commit": ""}, "base_commit is required"),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({**line, **change}) + "\n")
        with pytest.raises(TaskFileError, match=said):
            read_swebench_file(bad, tmp_path / "set" / "repos", PYTEST)
    done = invoke_treadle(
        "eval", "run", str(instances), "--format", "swebench",
        "--store", f"sqlite:///{tmp_path / 's.db'}",
    )  # fmt: skip
    assert done.returncode == 2
    assert "--format swebench needs --repos DIR" in done.stderr
