"""Scoring on a clean checkout (issue 24): the agent's patch is applied to a copy of the
starting files it never touched, the task's hidden files laid on top, then verify runs there.
An agent that edits the tests, hides its fix behind its own ignore file or a nested
repository, or runs out of time, does not pass; a patch or test patch that does not apply is a
failure saying so; fail_to_pass / pass_to_pass are scored per test."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from support.eval_tasks import FINISH, bash
from treadle.data.settings import ModelChoice, SandboxSettings
from treadle.eval.ignore_rules import exclude_lines
from treadle.eval.runner import TaskJob, run_task_attempt
from treadle.eval.scoring import read_test_outcomes
from treadle.eval.tasks import EvalTask
from treadle.runtime.snapshots.facts import snapshot_facts
from treadle.store.urls import open_store

CALC = "def add(a, b):\n    return a - b\n"
TEST = "import calc\nassert calc.add(2, 3) == 5, 'add is wrong'\nprint('ok')\n"
FAKE_PASS = "echo 'print(\"pass\")' > test_calc.py"


def starting_files(tmp_path: Path) -> Path:
    start = tmp_path / "start"
    if not start.exists():
        start.mkdir(parents=True)
        (start / "calc.py").write_text(CALC)
        (start / "test_calc.py").write_text(TEST)
        (start / ".gitignore").write_text("*.log\ncache/\n")
    return start


def attempt(tmp_path: Path, responses: list, **fields: object) -> dict:
    values: dict = {
        "id": "t",
        "instruction": "fix add",
        "workspace": str(starting_files(tmp_path)),
        "verify": "python3 test_calc.py",
        **fields,
    }
    task = EvalTask(**values, model=ModelChoice(kind="scripted", responses=responses))
    return run_task_attempt(
        TaskJob(
            eval_id="e1",
            task=task,
            attempt=1,
            conversation_id=uuid.uuid4().hex,
            store_url=f"sqlite:///{tmp_path / 'store.db'}",
            model=task.model,  # type: ignore[arg-type]
            work_dir=str(tmp_path / "work"),
        )
    )


def test_an_agent_that_rewrites_the_tests_fails_on_the_hidden_tests(tmp_path):
    # Before: verify ran in the agent's workspace, and `print("pass")` passed it.
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "test_calc.py").write_text(TEST)
    result = attempt(tmp_path, [bash(FAKE_PASS), FINISH], hidden_files=str(hidden))
    assert result["status"] == "finished"
    assert "test_calc.py" in result["patch"]  # its change is kept, and overwritten
    assert result["passed"] is False
    assert "add is wrong" in result["verify"]["output_tail"]
    assert result["reason"] == "verify exited 1"
    assert result["scoring"]["hidden_files"] is True


def test_a_patch_touching_a_protected_path_fails_naming_it(tmp_path):
    result = attempt(tmp_path, [bash(FAKE_PASS), FINISH], protected=["test_calc.py"])
    assert result["passed"] is False
    assert result["reason"] == "the patch touches protected path(s): test_calc.py"
    assert result["verify"] is None
    fixed = attempt(
        tmp_path / "b", [bash("sed -i 's/a - b/a + b/' calc.py"), FINISH], protected=["tests"]
    )
    assert fixed["passed"] is True  # a path beside the protected one is fine


def test_a_fix_behind_the_agents_own_ignore_file_is_in_the_patch(tmp_path):
    # Before: `git add --all` honoured calc2/.gitignore ("*"): an empty patch passed.
    script = [
        bash(
            "mkdir calc2 && printf 'def add(a, b):\\n    return a + b\\n' > calc2/__init__.py"
            " && echo '*' > calc2/.gitignore && echo 'from calc2 import add' > calc.py"
            " && echo noise > run.log && mkdir -p cache && echo c > cache/x"
        ),
        FINISH,
    ]
    result = attempt(tmp_path, script)
    assert result["passed"] is True  # on the clean checkout: the patch carries the fix
    assert "calc2/__init__.py" in result["patch"]
    assert "calc2/.gitignore" in result["patch"]
    # The starting files' own rules still apply, and what they left out is named.
    assert "run.log" not in result["patch"]
    assert "run.log (ignored by the starting files' rules)" in result["patch_left_out"]
    assert "cache/ (ignored by the starting files' rules)" in result["patch_left_out"]
    # The conversation's snapshots follow the same rules (treadle diff, replay --mode rerun).
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        last = snapshot_facts(store, result["conversation_id"])[-1]
    finally:
        store.close()
    skipped = last.value["skipped"]
    assert "run.log (ignored)" in skipped, skipped
    assert not [entry for entry in skipped if entry.startswith("calc2")], skipped


def test_a_fix_inside_a_nested_repository_is_reported_and_does_not_pass(tmp_path):
    script = [
        bash(
            "mkdir calc2 && cd calc2 && git init -q && "
            "printf 'def add(a, b):\\n    return a + b\\n' > __init__.py && cd .. && "
            "echo 'from calc2 import add' > calc.py"
        ),
        FINISH,
    ]
    result = attempt(tmp_path, script)
    assert result["passed"] is False  # the clean checkout has no calc2
    assert "calc2/ (a nested repository: its files are not taken)" in result["patch_left_out"]
    assert "No module named 'calc2'" in result["verify"]["output_tail"]


def test_a_timeout_with_a_passing_verify_is_a_failure_with_its_reason(tmp_path):
    script = [bash("sed -i 's/a - b/a + b/' calc.py && sleep 30"), FINISH]
    task = EvalTask(
        id="t",
        instruction="fix",
        workspace=str(starting_files(tmp_path)),
        verify="python3 test_calc.py",
        model=ModelChoice(kind="scripted", responses=script),
    )
    result = run_task_attempt(
        TaskJob("e1", task, 1, "c-timeout", f"sqlite:///{tmp_path / 'store.db'}", task.model,  # type: ignore[arg-type]
                task_timeout_s=2.0, work_dir=str(tmp_path / "work"))
    )  # fmt: skip
    assert result["status"] == "timeout"
    assert result["verify"]["exit_code"] == 0  # the files pass, the attempt does not
    assert result["passed"] is False
    assert result["reason"] == (
        "the conversation ended timeout: stopped after --task-timeout 2 s "
        "(only a finished one can pass)"
    )


def test_an_idle_conversation_with_a_passing_verify_fails(tmp_path):
    # The script ends without finish: the runtime stops at --max-steps... here its script
    # runs out, an error; either way only `finished` passes.
    result = attempt(tmp_path, [bash("sed -i 's/a - b/a + b/' calc.py")])
    assert result["status"] != "finished"
    assert result["verify"]["exit_code"] == 0
    assert result["passed"] is False
    assert result["reason"].startswith(f"the conversation ended {result['status']}")


def test_a_patch_that_does_not_apply_fails_with_that_reason(tmp_path):
    # setup makes cache/ (ignored: in the clean copy, not in the baseline); the agent puts a
    # file named cache in its place, which the clean checkout cannot take.
    script = [bash("rm -r cache && echo f > cache"), FINISH]
    result = attempt(tmp_path, script, setup="mkdir cache && echo c > cache/x")
    assert result["passed"] is False
    assert result["reason"].startswith("the patch does not apply to the starting files: ")
    assert "cache" in result["reason"]


def test_a_test_patch_is_applied_after_the_agents_and_a_conflict_is_named(tmp_path):
    test_patch = (
        "diff --git a/test_extra.py b/test_extra.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/test_extra.py\n@@ -0,0 +1 @@\n+import calc; assert calc.add(1, 1) == 2\n"
    )
    fix = [bash("sed -i 's/a - b/a + b/' calc.py"), FINISH]
    verify = "python3 test_calc.py && python3 test_extra.py"
    result = attempt(tmp_path, fix, test_patch=test_patch, verify=verify)
    assert result["passed"] is True
    assert "test_extra.py" not in result["patch"]  # the agent never saw it
    clash = [bash("sed -i 's/a - b/a + b/' calc.py && echo mine > test_extra.py"), FINISH]
    result = attempt(tmp_path / "b", clash, test_patch=test_patch, verify=verify)
    assert result["passed"] is False
    assert result["reason"].startswith(
        "the task's test_patch does not apply after the agent's patch: "
    )


def test_fail_to_pass_and_pass_to_pass_are_scored_per_test(tmp_path):
    start = starting_files(tmp_path)
    (start / "test_units.py").write_text(
        "import calc\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n\n"
        "def test_kept():\n    assert True\n\ndef test_other():\n    assert False\n"
    )
    pytest = f"{sys.executable} -m pytest -q -p no:cacheprovider"
    fields = {
        "verify": pytest,
        "fail_to_pass": ["test_units.py::test_add"],
        "pass_to_pass": ["test_units.py::test_kept"],
    }
    none = SandboxSettings(kind="none")  # the venv's pytest is not inside the sandbox
    fixed = _with_sandbox(tmp_path, [bash("sed -i 's/a - b/a + b/' calc.py"), FINISH], none, fields)
    assert fixed["tests"] == {
        "fail_to_pass": {"test_units.py::test_add": "PASSED"},
        "pass_to_pass": {"test_units.py::test_kept": "PASSED"},
    }
    assert fixed["passed"] is True  # test_other fails, but it is not listed
    unfixed = _with_sandbox(tmp_path / "b", [FINISH], none, fields)
    assert unfixed["tests"]["fail_to_pass"] == {"test_units.py::test_add": "FAILED"}
    assert unfixed["passed"] is False
    assert unfixed["reason"] == (
        "1 of 2 listed test(s) did not pass: test_units.py::test_add (FAILED)"
    )


def _with_sandbox(tmp_path: Path, responses: list, sandbox: SandboxSettings, fields: dict) -> dict:
    start = starting_files(tmp_path)
    if not (start / "test_units.py").exists():
        (start / "test_units.py").write_text(
            (tmp_path.parent / "start" / "test_units.py").read_text()
        )
    task = EvalTask(
        id="t",
        instruction="fix",
        workspace=str(start),
        model=ModelChoice(kind="scripted", responses=responses),
        **fields,
    )
    return run_task_attempt(
        TaskJob("e1", task, 1, "c", f"sqlite:///{tmp_path / 'store.db'}", task.model,  # type: ignore[arg-type]
                sandbox=sandbox, work_dir=str(tmp_path / "work"))
    )  # fmt: skip


def test_test_outcomes_read_the_short_summary_whole_ids_included():
    output = (
        "PASSED a.py::t[x - y]\nFAILED a.py::u - AssertionError: no\nERROR a.py::v\n"
        "XFAIL a.py::w - reason\n"
    )
    ids = ["a.py::t[x - y]", "a.py::u", "a.py::v", "a.py::w", "a.py::gone"]
    assert read_test_outcomes(output, ids) == {
        "a.py::t[x - y]": "PASSED",
        "a.py::u": "FAILED",
        "a.py::v": "ERROR",
        "a.py::w": "XFAIL",
        "a.py::gone": "missing",
    }


def test_ignore_rules_of_a_subfolder_are_anchored_there():
    assert exclude_lines("sub/.gitignore", "*.o\n/build/\n!keep.o\n# note\n\na/b\n") == [
        "sub/**/*.o",
        "sub/build/",
        "!sub/**/keep.o",
        "sub/a/b",
    ]
    assert exclude_lines(".gitignore", "*.log\n") == ["*.log"]


def test_the_agent_never_sees_the_hidden_files(tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "secret_test.py").write_text("print('hidden')\n")
    result = attempt(
        tmp_path,
        [bash(f"ls -a; cat {hidden}/secret_test.py"), FINISH],
        hidden_files=str(hidden),
        verify="python3 secret_test.py",
    )
    assert result["passed"] is True  # verify found it on the clean checkout
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        outputs = [
            stored.event.content
            for stored in store.get_range(result["conversation_id"], 0, 1000)
            if stored.event.kind == "observation"
        ]
    finally:
        store.close()
    assert "secret_test.py" in outputs[0]  # only as the name in the cat that failed
    assert "hidden')" not in outputs[0]
    assert "No such file or directory" in outputs[0]


def test_hidden_files_never_go_through_a_link_the_patch_made(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_x.py").write_text("print('hidden')\n")
    (hidden / "conftest.py").write_text("# hidden\n")
    # The agent's patch makes tests a link out of the checkout and conftest.py a folder.
    script = [bash(f"ln -s {outside} tests && mkdir conftest.py && echo x > conftest.py/f"), FINISH]
    result = attempt(
        tmp_path, script, hidden_files=str(hidden), verify="test -f tests/test_x.py -a ! -L tests"
    )
    assert "tests" in result["patch"]  # the link is part of the patch
    assert result["passed"] is True  # the hidden folder replaced the link
    assert list(outside.iterdir()) == []  # nothing was written through it
