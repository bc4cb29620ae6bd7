"""The server lists a store's evals and shows one eval's tasks, each opening its conversation
through the typed client; an unknown eval is a 404."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.eval_tasks import EXPECTED, InProcessEngine, write_eval
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.client.http import NotFound
from treadle.eval.driver import EvalPlan, run_eval
from treadle.eval.tasks import read_task_file
from treadle.store.eval_results import open_eval_results
from treadle.store.urls import open_store


def make_eval(url: str, folder: Path, eval_id: str, count: int) -> None:
    store = open_store(url)
    results = open_eval_results(url)
    try:
        plan = EvalPlan(eval_id, read_task_file(write_eval(folder, EXPECTED[-count:])), None, url)
        run_eval(plan, InProcessEngine(), results, store)
    finally:
        results.close()
        store.close()


def test_evals_are_listed_and_each_task_opens_its_conversation(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    make_eval(url, tmp_path / "a", "eval-a", 2)
    make_eval(url, tmp_path / "b", "eval-b", 3)
    server = ServerProcess(url, log_dir=tmp_path).start()
    try:
        with TreadleClient(server.base_url) as client:
            listed = client.list_evals()
            assert [view.id for view in listed.items] == ["eval-b", "eval-a"]  # newest first
            assert listed.items[0].tasks is None
            assert listed.items[0].summary.tasks == 3
            assert listed.next_offset is None
            assert [view.id for view in client.list_evals(limit=1).items] == ["eval-b"]
            shown = client.get_eval("eval-b")
            expected = EXPECTED[-3:]
            assert [task.task_id for task in shown.tasks] == [task.id for task in expected]
            assert [task.passed for task in shown.tasks] == [task.passed for task in expected]
            assert [task.status for task in shown.tasks] == [task.status for task in expected]
            assert shown.summary.passed == sum(task.passed for task in expected)
            assert shown.engine["name"] == "in-process"
            for task in shown.tasks:
                conversation = client.conversation(task.conversation_id)
                assert conversation.info().metadata["eval"]["task"] == task.task_id
            with pytest.raises(NotFound, match="no eval 'eval-nope'"):
                client.get_eval("eval-nope")
    finally:
        server.stop()
