"""``treadle eval run`` as a user runs it, on a local Ray with 2 workers: an eval of 12 scripted
tasks (passes, failed verifications, a model error) gives the exact report, every conversation
audits clean and every patch is the real diff; a worker killed mid-task is retried and nothing
is counted twice; a rerun runs nothing; PostgreSQL gives the same results; Ray's processes
are gone after each run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from support.cli import run_treadle
from support.eval_tasks import EXPECTED, SLOW_TASK, files_after_patch, write_eval
from support.postgres import backends, fresh_schema_url
from support.processes import host_pids_in_environment
from support.waiting import wait_until
from treadle.eval.driver import EVAL_ATTEMPT_KEY
from treadle.events.audit import audit_events
from treadle.events.model import StateChangeEvent
from treadle.store.leases import open_leases
from treadle.store.urls import open_store

RUN_MARKER = "TREADLE_TEST_EVAL_RUN"
"""Set in each eval child's environment: Ray's processes inherit it, so a test counts only the
processes its own run started (another eval on this machine has other ones)."""


def eval_environment(temp_dir: Path) -> dict[str, str]:
    """The child's environment: the store from its command line, a marker of its own, and a
    private temporary folder, where its local Ray keeps its session folder."""
    environment = {name: value for name, value in os.environ.items() if name != "TREADLE_STORE"}
    environment.update({RUN_MARKER: temp_dir.name, "TMPDIR": str(temp_dir)})
    return environment


def private_temp_dir() -> Path:
    # Short on purpose: Ray's socket paths live below it and AF_UNIX paths stop at 107 bytes.
    return Path(tempfile.mkdtemp(prefix="trt-", dir="/tmp"))


def left_behind(temp_dir: Path) -> tuple[list[int], list[Path]]:
    """What the run with this private folder left: live processes, Ray session folders."""
    return host_pids_in_environment(RUN_MARKER, temp_dir.name), list(temp_dir.glob("treadle-ray-*"))


def run_eval(tasks: Path, store_url: str, report: Path, *extra: str) -> dict[str, Any]:
    temp_dir = private_temp_dir()
    try:
        done = run_treadle(
            "eval", "run", str(tasks), "--store", store_url, "--workers", "2", "-o", str(report),
            *extra, env=eval_environment(temp_dir),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + done.stdout
        # Every process of the Ray this run started is gone with it, and its session folder.
        assert left_behind(temp_dir) == ([], [])
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return json.loads(report.read_text())


def check_results(report: dict[str, Any], tmp_path: Path) -> None:
    """The report says what each task did, exactly; each patch gives the task's files."""
    results = report["results"]
    assert [result["task_id"] for result in results] == [task.id for task in EXPECTED]
    for task, result in zip(EXPECTED, results, strict=True):
        assert result["status"] == task.status, (task.id, result)
        assert result["passed"] is task.passed, (task.id, result)
        assert result["verify"]["exit_code"] == task.verify_exit, (task.id, result)
        assert result["steps"] == task.steps, (task.id, result)
        assert result["tokens"] > 0
        assert result["cost_usd"] == 0.0
        assert result["conversation_id"]
        applied = files_after_patch(result["patch"], tmp_path / f"applied-{task.id}")
        assert applied == task.final_files, (task.id, result["patch"])
    passed = sum(task.passed for task in EXPECTED)
    summary = report["summary"]
    share = passed / 12
    assert summary == {
        "tasks": 12,
        "samples": 12,
        "epochs": 1,
        "passed": passed,
        "failed": 12 - passed,
        "not_run": 0,
        "pass_rate": round(share, 4),
        "stderr": round((share * (1 - share) * 12 / 11 / 12) ** 0.5, 4),
        "pass_at_k": {"1": round(share, 4)},
        "tokens": sum(result["tokens"] for result in results),
        "cost_usd": 0.0,
        "seconds": summary["seconds"],
    }
    assert report["engine"] == {"name": "ray", "address": "local", "workers": 2}


def attempt_facts(store_url: str, conversation_id: str) -> list[dict[str, Any]]:
    store = open_store(store_url)
    try:
        events = [stored.event for stored in store.get_range(conversation_id, 0, 10**6)]
    finally:
        store.close()
    return [
        dict(event.value)  # type: ignore[arg-type]
        for event in events
        if isinstance(event, StateChangeEvent) and event.key == EVAL_ATTEMPT_KEY
    ]


def audit_clean(store_url: str, conversation_ids: list[str]) -> None:
    store = open_store(store_url)
    try:
        for conversation_id in conversation_ids:
            events = [stored.event for stored in store.get_range(conversation_id, 0, 10**6)]
            report = audit_events(events)
            assert report.clean, (conversation_id, report.violations)
    finally:
        store.close()


@pytest.fixture(scope="module")
def sqlite_eval(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("eval-sqlite")
    tasks = write_eval(folder)
    url = f"sqlite:///{folder / 'store.db'}"
    return tasks, url, run_eval(tasks, url, folder / "report.json")


def test_an_eval_of_12_tasks_reports_exactly_what_each_did(sqlite_eval, tmp_path):
    _tasks, url, report = sqlite_eval
    check_results(report, tmp_path)
    assert all(result["attempts"] == 1 for result in report["results"])
    assert not any(result["skipped"] for result in report["results"])
    ids = [result["conversation_id"] for result in report["results"]]
    audit_clean(url, ids)
    for result in report["results"]:
        assert attempt_facts(url, result["conversation_id"]) == [
            {
                "eval": report["eval_id"],
                "task": result["task_id"],
                "attempt": 1,
                "outcome": "result",
            }
        ]


def test_a_rerun_of_a_finished_eval_runs_nothing(sqlite_eval, tmp_path):
    tasks, url, first = sqlite_eval
    store = open_store(url)
    conversations = len(store.list_conversations(limit=1000))
    store.close()
    again = run_eval(tasks, url, tmp_path / "again.json")
    assert again["eval_id"] == first["eval_id"]
    assert all(result["skipped"] for result in again["results"])
    strip = [{**result, "skipped": False} for result in again["results"]]
    assert strip == first["results"]
    store = open_store(url)
    assert len(store.list_conversations(limit=1000)) == conversations
    store.close()
    shown = run_treadle("eval", "report", first["eval_id"], "--store", url, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["results"] == first["results"]


@pytest.mark.postgres
def test_the_same_eval_on_postgresql_gives_the_same_results(sqlite_eval, tmp_path):
    tasks, _url, on_sqlite = sqlite_eval
    with fresh_schema_url("treadle_eval") as url:
        report = run_eval(tasks, url, tmp_path / "report.json")
        # The workers' and the driver's connections ended with the run.
        wait_until(lambda: backends(url) == 0, timeout_s=10, what="no connection left")
        check_results(report, tmp_path / "pg")
        audit_clean(url, [result["conversation_id"] for result in report["results"]])

    def comparable(result: dict[str, Any]) -> dict[str, Any]:
        # Not the attempts: an attempt that failed on a loaded machine (a worker's connection
        # refused while another suite held the server's) is retried, as it should be; the
        # result it gave is what must be the same. tests/eval/test_driver.py counts retries.
        return {
            key: value
            for key, value in result.items()
            if key not in ("conversation_id", "seconds", "model_seconds", "attempts")
        } | {"verify": {**result["verify"], "seconds": None}}

    assert report["eval_id"] == on_sqlite["eval_id"]
    assert len(report["results"]) == len(on_sqlite["results"])
    for on_postgres, on_lite in zip(report["results"], on_sqlite["results"], strict=True):
        mine, theirs = comparable(on_postgres), comparable(on_lite)
        differ = {key: (mine.get(key), theirs.get(key)) for key in mine.keys() | theirs.keys()}
        # the keys that differ, each (postgres, sqlite): a failure says what, not "index 5"
        assert mine == theirs, {k: pair for k, pair in differ.items() if pair[0] != pair[1]}


def test_a_worker_killed_mid_task_is_retried_and_counted_once(tmp_path):
    tasks = write_eval(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    report_path = tmp_path / "report.json"
    temp_dir = private_temp_dir()
    child = subprocess.Popen(
        [sys.executable, "-m", "treadle", "eval", "run", str(tasks), "--store", url,
         "--workers", "2", "-o", str(report_path), "--work-dir", str(tmp_path / "work")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=eval_environment(temp_dir),
    )  # fmt: skip
    try:
        found: list[dict[str, Any]] = []
        wait_until(
            lambda: found.append(_slow_task_running(url) or {}) or bool(found[-1]),
            timeout_s=120,
            what="the slow task's first attempt running its sleep",
        )
        first = found[-1]
        leases = open_leases(url)
        try:  # the worker runs it under the run lease, as `treadle run` does
            assert leases.is_held(first["conversation_id"])
        finally:
            leases.close()
        worker_pid = int(first["worker"].rsplit(":", 1)[1])
        os.kill(worker_pid, signal.SIGKILL)
        out, err = child.communicate(timeout=240)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err + out
    assert left_behind(temp_dir) == ([], [])
    shutil.rmtree(temp_dir)
    # The killed worker never removed its attempt's folder: the eval did.
    assert list((tmp_path / "work").iterdir()) == []
    report = json.loads(report_path.read_text())
    check_results(report, tmp_path)
    by_task = {result["task_id"]: result for result in report["results"]}
    assert by_task[SLOW_TASK]["attempts"] == 2
    assert by_task[SLOW_TASK]["conversation_id"] != first["conversation_id"]
    assert {r["attempts"] for t, r in by_task.items() if t != SLOW_TASK} == {1}
    eval_id = report["eval_id"]
    # The killed attempt's conversation is kept, marked, and never the task's result.
    (killed,) = attempt_facts(url, first["conversation_id"])
    assert killed.pop("error")  # what Ray said of the lost worker
    assert killed == {"eval": eval_id, "task": SLOW_TASK, "attempt": 1, "outcome": "worker_died"}
    assert attempt_facts(url, by_task[SLOW_TASK]["conversation_id"]) == [
        {"eval": eval_id, "task": SLOW_TASK, "attempt": 2, "outcome": "result"}
    ]
    audit_clean(url, [first["conversation_id"], *(r["conversation_id"] for r in by_task.values())])
    # A rerun finds every task finished: nothing runs, no Ray starts.
    again = run_eval(tasks, url, tmp_path / "again.json")
    assert all(result["skipped"] for result in again["results"])
    assert again["summary"] == report["summary"]


def _slow_task_running(url: str) -> dict[str, Any] | None:
    """The slow task's first attempt (its conversation id and worker) once its sleep runs."""
    if not Path(url.removeprefix("sqlite:///")).exists():
        return None
    store = open_store(url)
    try:
        for info in store.list_conversations(limit=100):
            mark = info.metadata.get("eval")
            if mark and mark["task"] == SLOW_TASK and mark["attempt"] == 1:
                kinds = [shape.kind for shape in store.shapes(info.id)]
                if "action" in kinds:
                    time.sleep(0.5)  # the sleep has started
                    return {**mark, "conversation_id": info.id}
        return None
    finally:
        store.close()
