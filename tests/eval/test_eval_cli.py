"""``treadle eval`` at the command line: bad input exits 2 with the reason (a bad task line, a
SQLite store for a cluster, no Ray installed, no model, an unknown eval), and a task that
cannot run to a result after its retries makes the run exit 1, the others' results kept; on a
terminal a progress bar shows passes so far and the time left, Ray's own logs above it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from support.cli import invoke_treadle, run_in_pty, without_escapes
from support.eval_tasks import EXPECTED, write_eval


def test_a_bad_task_line_is_named_and_nothing_runs(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "instruction": "x", "workspace": ".", "verify": "true"}\n{oops\n')
    store = tmp_path / "store.db"
    done = invoke_treadle(
        "eval", "run", str(tasks), "--store", f"sqlite:///{store}", "--script", "s"
    )
    assert done.returncode == 2
    assert f"error: {tasks}:2: not JSON" in done.stderr
    assert not store.exists()


def test_a_cluster_needs_a_postgresql_store(tmp_path):
    tasks = write_eval(tmp_path, EXPECTED[:1])
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = invoke_treadle("eval", "run", str(tasks), "--store", url, "--ray-address", "auto")
    assert done.returncode == 2
    assert "cannot write this machine's SQLite file" in done.stderr
    assert "give a PostgreSQL store" in done.stderr


def test_without_ray_the_run_says_how_to_install_it(tmp_path):
    tasks = write_eval(tmp_path, EXPECTED[:1])
    hide_ray = "import sys; sys.modules['ray'] = None; from treadle.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", hide_ray, "eval", "run", str(tasks), "--store",
         f"sqlite:///{tmp_path / 'store.db'}"],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2
    assert "pip install 'treadle[eval]'" in done.stderr


def test_tasks_without_a_model_need_one_given(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    (tmp_path / "w").mkdir()
    tasks.write_text('{"id": "a", "instruction": "x", "workspace": "w", "verify": "true"}\n')
    done = invoke_treadle(
        "eval", "run", str(tasks), "--store", f"sqlite:///{tmp_path / 'store.db'}",
        drop=("TREADLE_STORE", "TREADLE_MODEL"),
    )  # fmt: skip
    assert done.returncode == 2
    assert "task(s) a name no model: give --model NAME" in done.stderr


@pytest.mark.parametrize(
    ("eval_id", "said"),
    [
        ("..", "eval id '..' (2 characters) is not allowed"),
        ("a/b", "it holds '/'"),
        ("<img src=x onerror=alert(1)>", "it holds ' ', '(', ')', '<', '='"),
        ("e" * 129, "(129 characters) is not allowed"),
    ],
)
def test_an_eval_id_that_is_not_a_url_segment_is_refused_and_nothing_runs(tmp_path, eval_id, said):
    # Such an id was run and stored: GET /api/evals/a/b never reaches it, and the Canvas's
    # fetch of /api/evals/.. is /api/ once the browser resolves the dots.
    tasks = write_eval(tmp_path, EXPECTED[:1])
    store = tmp_path / "store.db"
    done = invoke_treadle(
        "eval", "run", str(tasks), "--store", f"sqlite:///{store}", "--eval-id", eval_id
    )
    assert done.returncode == 2
    assert said in done.stderr
    assert not store.exists()


@pytest.mark.parametrize(
    ("where", "said"),
    [("missing/report.json", "no folder"), (".", "a folder, not a file for the report")],
)
def test_a_report_path_that_cannot_be_written_is_refused_before_anything_runs(
    tmp_path, where, said
):
    # It was found out after the whole eval had run: a traceback, and exit 1.
    tasks = write_eval(tmp_path, EXPECTED[:1])
    store = tmp_path / "store.db"
    done = invoke_treadle(
        "eval", "run", str(tasks), "--store", f"sqlite:///{store}", "-o", str(tmp_path / where)
    )
    assert done.returncode == 2
    assert f"error: -o {tmp_path / where}" in done.stderr
    assert said in done.stderr
    assert not store.exists()


def test_the_report_of_an_unknown_eval_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    done = invoke_treadle("eval", "report", "eval-nope", "--store", url)
    assert done.returncode == 2
    assert f"no eval 'eval-nope' in {url}" in done.stderr  # the error names the store it read


def test_a_task_without_a_result_after_its_retries_exits_1(tmp_path):
    tasks = write_eval(tmp_path, EXPECTED[:1])
    lines = [json.loads(line) for line in tasks.read_text().splitlines()]
    lines.append({**lines[0], "id": "gone", "workspace": str(tmp_path / "missing")})
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = tmp_path / "report.json"
    # A link at the report's path is replaced by the report, never written through.
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    report.symlink_to(precious)
    # On a terminal: the progress bar (issue 26) is drawn as a user sees it.
    code, shown = run_in_pty(
        ["eval", "run", str(tasks), "--store", f"sqlite:///{tmp_path / 'store.db'}",
         "--retries", "1", "-o", str(report)],
        timeout_s=300,
    )  # fmt: skip
    assert code == 1, shown
    assert precious.read_text() == "keep me\n"
    assert not report.is_symlink()
    assert not list(tmp_path.glob(".report.json.*"))  # no partial file left
    results = {result["task_id"]: result for result in json.loads(report.read_text())["results"]}
    assert results["sed-fix"]["passed"] is True
    assert results["gone"]["status"] == "not_run"
    assert results["gone"]["attempts"] == 2
    assert "is not a folder on this machine" in results["gone"]["reason"]
    assert "not run 1" in shown
    # The bar: Ray starting, then passes so far and the time left; anything Ray logs is
    # printed on a line of its own above it, never into the bar's line.
    drawn = re.split(r"[\r\n]", without_escapes(shown))
    bars = [line for line in drawn if " passed " in line and " left " in line]
    assert any("starting Ray" in line for line in bars), drawn[:5]
    assert "2/2 1 passed" in bars[-1], bars[-3:]
    assert not [line for line in bars if "Ray cluster" in line or "WARNING" in line], bars
