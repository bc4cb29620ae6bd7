"""The eval's driver with the attempts run in this process (Ray's part is in test_eval_ray):
an attempt that raises is tried again up to --retries times, then the task is not_run; a
task left running by a driver that died is marked abandoned and run again; an eval id reused
with another task file is refused (a store made by the old eval layer: test_old_eval_tables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.eval_tasks import EXPECTED, FINISH, InProcessEngine, write_eval
from treadle.data.settings import ConversationSettings
from treadle.eval.driver import EVAL_ATTEMPT_KEY, EvalPlan, run_eval
from treadle.eval.results import EvalMismatch, EvalRecord, begin_eval
from treadle.eval.tasks import read_task_file
from treadle.events.model import StateChangeEvent
from treadle.store.eval_results import open_eval_results
from treadle.store.urls import open_store


def facts(store: Any, conversation_id: str) -> list[dict]:
    return [
        dict(stored.event.value)
        for stored in store.get_range(conversation_id, 0, 1000)
        if isinstance(stored.event, StateChangeEvent) and stored.event.key == EVAL_ATTEMPT_KEY
    ]


@pytest.fixture
def two_tasks(tmp_path: Path) -> tuple[EvalPlan, Any, Any]:
    tasks = write_eval(tmp_path, EXPECTED[:2])
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    results = open_eval_results(url)
    plan = EvalPlan("e1", read_task_file(tasks), None, url, retries=2)
    yield plan, store, results
    results.close()
    store.close()


def test_an_attempt_that_raises_is_retried_then_the_task_is_not_run(two_tasks):
    plan, store, results = two_tasks
    engine = InProcessEngine(fail=("editor-fix",))
    run = run_eval(plan, engine, results, store)
    rows = {row.task_id: row for row in run.tasks}
    assert rows["sed-fix"].state == "done"
    assert rows["sed-fix"].attempts == 1
    assert rows["editor-fix"].state == "not_run"
    assert rows["editor-fix"].attempts == 3  # the first and 2 retries
    assert rows["editor-fix"].result["reason"] == (
        "no result after 3 attempt(s): failed (RuntimeError: no)"
    )
    # A rerun tries it again (3 more), and skips the finished one.
    again = run_eval(plan, InProcessEngine(fail=("editor-fix",)), results, store)
    assert again.skipped == {"sed-fix"}
    assert {row.task_id: row.attempts for row in again.tasks}["editor-fix"] == 6


def test_a_task_left_running_by_a_dead_driver_is_marked_abandoned_and_run_again(two_tasks):
    plan, store, results = two_tasks
    begin_eval(
        results,
        EvalRecord(
            id="e1",
            tasks_file=str(plan.task_file.path),
            tasks_sha256=plan.task_file.sha256,
            settings={"model": None},
            engine={},
            task_ids=("sed-fix", "editor-fix"),
            created_at="2026-01-01T00:00:00",
            updated_at="2026-01-01T00:00:00",
        ),
    )
    left = store.create_conversation(
        "left-behind",
        metadata={"settings": ConversationSettings.scripted_inline([FINISH], "/tmp").to_metadata()},
    )
    results.start_attempt("e1", "sed-fix", 0, left.id)
    run = run_eval(plan, InProcessEngine(), results, store)
    assert facts(store, left.id) == [
        {"eval": "e1", "task": "sed-fix", "attempt": 1, "outcome": "abandoned"}
    ]
    row = {row.task_id: row for row in run.tasks}["sed-fix"]
    assert row.state == "done"
    assert row.attempts == 2
    assert row.conversation_id != left.id
    assert facts(store, row.conversation_id) == [
        {"eval": "e1", "task": "sed-fix", "attempt": 2, "outcome": "result"}
    ]


def test_an_attempt_without_a_result_says_why_in_its_conversation(two_tasks):
    """A failed attempt's conversation keeps the failure (its fact's ``error``), checked as
    a fact of the registry."""
    from treadle.eval.driver import _mark_attempt

    _plan, store, _results = two_tasks
    made = store.create_conversation(title="an attempt that failed")
    _mark_attempt(store, "e1", "sed-fix", 1, made.id, "failed", "StoreUnavailable: refused")
    assert facts(store, made.id) == [
        {
            "eval": "e1",
            "task": "sed-fix",
            "attempt": 1,
            "outcome": "failed",
            "error": "StoreUnavailable: refused",
        }
    ]


def test_an_eval_id_reused_with_other_tasks_or_model_is_refused(two_tasks, tmp_path):
    plan, store, results = two_tasks
    run_eval(plan, InProcessEngine(), results, store)
    other = write_eval(tmp_path / "other", EXPECTED[2:3])
    with pytest.raises(EvalMismatch, match="was made from another task file"):
        run_eval(
            EvalPlan("e1", read_task_file(other), None, plan.store_url),
            InProcessEngine(),
            results,
            store,
        )
    assert len(results.tasks("e1")) == 2  # nothing stored was changed


def test_treadle_schema_describes_the_eval_attempt_fact():
    from treadle.events.model import events_json_schema

    fact = events_json_schema()["facts"][EVAL_ATTEMPT_KEY]
    assert set(fact["required"]) == {"eval", "task", "attempt", "outcome"}
    assert fact["properties"]["outcome"]["enum"] == ["result", "worker_died", "failed", "abandoned"]
