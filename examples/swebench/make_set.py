"""Build a small SWE-bench-shaped eval set from local git repositories (no network).

    python examples/swebench/make_set.py OUT

makes ``OUT/repos/treadle-examples/minicalc`` (a git repository with a bug per task) and
``OUT/instances.jsonl``: SWE-bench task instances (``instance_id``, ``repo`` as owner/name,
``base_commit``, ``problem_statement``, ``test_patch``, ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` as
JSON strings), each with a scripted ``model`` (a Treadle extension SWE-bench ignores) so that
the set runs offline:

    treadle eval run OUT/instances.jsonl --format swebench --repos OUT/repos \\
        --test-command "python -m pytest -p no:cacheprovider" --sandbox none --store URL

(``--sandbox none``: pytest comes from your environment, which the sandbox does not show.)
Commits are made with fixed dates and names, so their ids are the same on every machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

OWNER_NAME = "treadle-examples/minicalc"
CALC = (
    "def add(a, b):\n    return a - b\n\n\n"
    "def mean(values):\n    return sum(values) / len(values)\n\n\n"
    "def double(x):\n    return x * 2\n"
)
TEST_BASIC = "from calc import double\n\n\ndef test_double():\n    assert double(2) == 4\n"
TEST_MEAN = "from calc import mean\n\n\ndef test_mean():\n    assert mean([1, 3]) == 2\n"
GITIGNORE = "__pycache__/\n*.pyc\nbuild/\n"


def _git(folder: Path, *args: str, stdin: str | None = None) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "example",
        "GIT_AUTHOR_EMAIL": "example@treadle.invalid",
        "GIT_COMMITTER_NAME": "example",
        "GIT_COMMITTER_EMAIL": "example@treadle.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
    }
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=folder, env=env, input=stdin, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def _bash(command: str) -> dict:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
FIX_ADD = "sed -i 's/a - b/a + b/' calc.py"

TEST_ADD_PATCH = (
    "diff --git a/tests/test_add.py b/tests/test_add.py\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/tests/test_add.py\n@@ -0,0 +1,5 @@\n+from calc import add\n+\n+\n"
    "+def test_add():\n+    assert add(2, 3) == 5\n"
)
TEST_MEAN_PATCH = (
    "diff --git a/tests/test_mean.py b/tests/test_mean.py\n--- a/tests/test_mean.py\n"
    "+++ b/tests/test_mean.py\n@@ -3,3 +3,7 @@ from calc import mean\n \n def test_mean():\n"
    "     assert mean([1, 3]) == 2\n+\n+\n+def test_mean_of_nothing():\n"
    "+    assert mean([]) == 0.0\n"
)

TASKS = [
    {
        "instance_id": "minicalc-1",
        "problem_statement": "calc.add subtracts its arguments: make it add them.",
        "test_patch": TEST_ADD_PATCH,
        "FAIL_TO_PASS": ["tests/test_add.py::test_add"],
        "PASS_TO_PASS": ["tests/test_basic.py::test_double"],
        "script": [_bash(FIX_ADD), FINISH],
        "expected": "passes: the fix is in the patch; the hidden test passes",
    },
    {
        "instance_id": "minicalc-2",
        "problem_statement": "calc.mean([]) raises ZeroDivisionError: make it return 0.0.",
        "test_patch": TEST_MEAN_PATCH,
        "FAIL_TO_PASS": ["tests/test_mean.py::test_mean_of_nothing"],
        "PASS_TO_PASS": ["tests/test_mean.py::test_mean"],
        # The agent edits the tests instead of the code: its change to tests/test_mean.py
        # clashes with the hidden test patch, which does not apply.
        "script": [
            _bash("printf 'def test_mean():\\n    assert True\\n' > tests/test_mean.py"),
            FINISH,
        ],
        "expected": "fails: the agent edited the tests; the test patch does not apply",
    },
    {
        "instance_id": "minicalc-3",
        "problem_statement": "calc.add subtracts its arguments: make it add them.",
        "test_patch": TEST_ADD_PATCH,
        "FAIL_TO_PASS": ["tests/test_add.py::test_add"],
        "PASS_TO_PASS": ["tests/test_basic.py::test_double"],
        # The fix lives in a new package the agent hides with its own .gitignore ("*"): only
        # the repository's own ignore rules apply, so the patch carries it.
        "script": [
            _bash(
                "mkdir fastcalc && printf 'def add(a, b):\\n    return a + b\\n' > "
                "fastcalc/__init__.py && echo '*' > fastcalc/.gitignore && "
                "sed -i 's/^def add(a, b):/from fastcalc import add as _add\\n\\n\\n"
                "def add(a, b):\\n    return _add(a, b)\\n\\n\\ndef _old_add(a, b):/' calc.py"
            ),
            FINISH,
        ],
        "expected": "passes: the fix behind the agent's own .gitignore is in the patch",
    },
    {
        "instance_id": "minicalc-4",
        "problem_statement": "calc.add subtracts its arguments: make it add them.",
        "test_patch": TEST_ADD_PATCH,
        "FAIL_TO_PASS": ["tests/test_add.py::test_add"],
        "PASS_TO_PASS": ["tests/test_basic.py::test_double"],
        # A fix put in build/, which the repository's own .gitignore ignores: left out of the
        # patch (and named in patch_left_out), so the clean checkout still subtracts.
        "script": [
            _bash(
                "mkdir -p build && printf 'def add(a, b):\\n    return a + b\\n' > build/fix.py"
                ' && sed -i \'s/return a - b/import sys; sys.path.insert(0, "build"); '
                "import fix; return fix.add(a, b)/' calc.py"
            ),
            FINISH,
        ],
        "expected": "fails: the fix is in build/, ignored by the repository's .gitignore",
    },
]


def build(out: Path) -> Path:
    """Make the repository and the instances file in ``out``; the file's path."""
    repo = out / "repos" / OWNER_NAME
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "calc.py").write_text(CALC)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_basic.py").write_text(TEST_BASIC)
    (repo / "tests" / "test_mean.py").write_text(TEST_MEAN)
    (repo / ".gitignore").write_text(GITIGNORE)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "minicalc")
    base = _git(repo, "rev-parse", "HEAD").strip()
    lines = []
    for task in TASKS:
        instance = {
            "instance_id": task["instance_id"],
            "repo": OWNER_NAME,
            "base_commit": base,
            "problem_statement": task["problem_statement"],
            "test_patch": task["test_patch"],
            # As SWE-bench stores them: JSON strings of lists.
            "FAIL_TO_PASS": json.dumps(task["FAIL_TO_PASS"]),
            "PASS_TO_PASS": json.dumps(task["PASS_TO_PASS"]),
            "model": {"kind": "scripted", "responses": task["script"]},
        }
        lines.append(json.dumps(instance))
    path = out / "instances.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_set.py OUT (a folder that does not exist yet)")
    print(build(Path(sys.argv[1])))
