"""A tiny repository and an eval of scripted tasks on it, with what each task must end with:
the tests of ``treadle eval`` check the report against ``EXPECTED`` and every patch against
the files each task must leave; ``InProcessEngine`` runs attempts in the test's own process
(the driver's logic without Ray: Ray's part is tested in tests/eval/test_eval_ray.py)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treadle.eval.ray_engine import AttemptDone
from treadle.eval.runner import TaskJob, run_task_attempt

CALC = "def add(a, b):\n    return a - b\n\n\ndef double(x):\n    return x * 2\n"
FIXED_CALC = CALC.replace("a - b", "a + b")
README = "A tiny calculator.\n"
STARTING_FILES = {"calc.py": CALC, "README.md": README}

VERIFY_ADD = "python3 -c 'import calc; assert calc.add(2, 3) == 5'"


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


def edit(path: str, old: str, new: str) -> dict[str, Any]:
    arguments = {"command": "str_replace", "path": path, "old_str": old, "new_str": new}
    return {"tool_calls": [{"name": "file_editor", "arguments": arguments}]}


FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


@dataclass(frozen=True)
class ExpectedTask:
    """A task of the eval and how it must end."""

    id: str
    responses: list[dict[str, Any]]
    final_files: dict[str, str]
    """The workspace's files after the agent (what the patch applied to the start gives)."""
    status: str
    passed: bool
    verify_exit: int | None
    steps: int
    verify: str = VERIFY_ADD
    source: str = "workspace"
    setup: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _with(**changes: str | None) -> dict[str, str]:
    files = dict(STARTING_FILES)
    for name, text in changes.items():
        if text is None:
            files.pop(name.replace("_", "."), None)
        else:
            files[name.replace("_", ".")] = text
    return files


SLOW_TASK = "slow-fix"
"""The task whose first step sleeps: the worker-kill test kills its worker then."""

EXPECTED: list[ExpectedTask] = [
    ExpectedTask(
        "sed-fix",
        [bash("sed -i 's/a - b/a + b/' calc.py"), FINISH],
        _with(calc_py=FIXED_CALC),
        "finished",
        True,
        0,
        2,
    ),
    ExpectedTask(
        "editor-fix",
        [edit("calc.py", "a - b", "a + b"), FINISH],
        _with(calc_py=FIXED_CALC),
        "finished",
        True,
        0,
        2,
    ),
    ExpectedTask(
        "repo-fix",
        [bash("sed -i 's/a - b/b + a/' calc.py"), FINISH],
        _with(calc_py=CALC.replace("a - b", "b + a")),
        "finished",
        True,
        0,
        2,
        source="repo",
    ),
    ExpectedTask(
        "new-file",
        [bash("printf 'hello\\n' > notes.txt && mkdir -p docs && echo x > docs/a.md"), FINISH],
        _with(notes_txt="hello\n", **{"docs/a_md": "x\n"}),
        "finished",
        True,
        0,
        2,
        verify="grep -q hello notes.txt",
    ),
    ExpectedTask(
        "remove-readme",
        [bash("rm README.md"), FINISH],
        _with(README_md=None),
        "finished",
        True,
        0,
        2,
        verify="test ! -e README.md",
    ),
    ExpectedTask(
        "setup-then-fix",
        [bash("cat made-by-setup.txt && sed -i 's/a - b/a + b/' calc.py"), FINISH],
        _with(calc_py=FIXED_CALC),  # the setup's file is a starting file: not in the patch
        "finished",
        True,
        0,
        2,
        setup="echo 'from setup' > made-by-setup.txt",
    ),
    ExpectedTask(
        SLOW_TASK,
        [bash("sleep 6 && sed -i 's/a - b/a + b/' calc.py"), FINISH],
        _with(calc_py=FIXED_CALC),
        "finished",
        True,
        0,
        2,
    ),
    ExpectedTask("no-change", [FINISH], _with(), "finished", False, 1, 1),
    ExpectedTask(
        "wrong-fix",
        [bash("sed -i 's/a - b/a * b/' calc.py"), FINISH],
        _with(calc_py=CALC.replace("a - b", "a * b")),
        "finished",
        False,
        1,
        2,
    ),
    ExpectedTask(
        "breaks-double",
        [edit("calc.py", "x * 2", "x * 3"), FINISH],
        _with(calc_py=CALC.replace("x * 2", "x * 3")),
        "finished",
        False,
        1,
        2,
        verify="python3 -c 'import calc; assert calc.double(2) == 4'",
    ),
    ExpectedTask(
        "repo-no-change",
        [FINISH],
        _with(),
        "finished",
        False,
        1,
        1,
        source="repo",
    ),
    ExpectedTask(
        "model-errors",
        [bash("echo looking")],  # then the script runs out: a model error
        _with(),
        "error",
        False,
        1,
        1,
    ),
]


def make_repository(folder: Path) -> str:
    """A git repository holding the starting files in its second commit; that commit's id
    (its first commit holds other files: checking out the right one matters)."""
    folder.mkdir(parents=True)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(folder),
        "PATH": "/usr/bin:/bin",
    }

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=folder, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    git("init", "-q")
    (folder / "calc.py").write_text("old\n")
    git("add", "-A")
    git("commit", "-qm", "first")
    for name, text in STARTING_FILES.items():
        (folder / name).write_text(text)
    git("add", "-A")
    git("commit", "-qm", "second")
    commit = git("rev-parse", "HEAD")
    (folder / "calc.py").write_text("later\n")
    git("commit", "-qam", "third")
    return commit


def write_eval(folder: Path, tasks: list[ExpectedTask] | None = None) -> Path:
    """The task file of ``tasks`` (default: ``EXPECTED``) in ``folder``, with the starting
    files as a folder (``start/``) and as a repository (``repo/``)."""
    start = folder / "start"
    start.mkdir(parents=True)
    for name, text in STARTING_FILES.items():
        (start / name).write_text(text)
    commit = make_repository(folder / "repo")
    lines = []
    for task in tasks or EXPECTED:
        line: dict[str, Any] = {"id": task.id, "instruction": f"Task {task.id}: fix calc.py"}
        if task.source == "repo":
            line.update(repo="repo", commit=commit)
        else:
            line["workspace"] = "start"
        if task.setup is not None:
            line["setup"] = task.setup
        line["verify"] = task.verify
        line["model"] = {"kind": "scripted", "responses": task.responses}
        lines.append(json.dumps(line))
    path = folder / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def files_after_patch(patch: str, into: Path) -> dict[str, str]:
    """The starting files with ``patch`` applied by ``git apply`` in ``into`` (a new folder)."""
    into.mkdir(parents=True)
    for name, text in STARTING_FILES.items():
        (into / name).write_text(text)
    if patch:
        subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-"],
            cwd=into,
            input=patch,
            text=True,
            check=True,
            capture_output=True,
        )
    return {
        str(path.relative_to(into)): path.read_text()
        for path in sorted(into.rglob("*"))
        if path.is_file()
    }


class InProcessEngine:
    """Runs each attempt at once in this process; ``fail`` names tasks whose attempts raise."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.fail = fail
        self.done: list[AttemptDone] = []
        self.jobs: list[TaskJob] = []

    description = {"name": "in-process", "address": "local", "workers": 1}  # noqa: RUF012
    idle_slots = 1

    def submit(self, job: TaskJob) -> None:
        self.jobs.append(job)
        if job.task.id in self.fail:
            self.done.append(AttemptDone(job, None, "failed", "RuntimeError: no"))
        else:
            self.done.append(AttemptDone(job, run_task_attempt(job), "result"))

    def wait(self, timeout_s: float = 1.0) -> list[AttemptDone]:
        done, self.done = self.done, []
        return done
