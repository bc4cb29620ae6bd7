"""Two server processes on one store (PostgreSQL, and SQLite with two processes on one file):
a pause, a message, a reject, a delete or an import sent to server B while server A runs the
conversation act as they would on A alone, and B notices a conversation replaced under it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.postgres import fresh_schema_url
from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import RemoteError, TreadleClient
from treadle.events.model import ActionEvent, MessageEvent, PauseEvent
from treadle.runtime.status import ConversationStatus as Status

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


RELEASE = "release"
"""The file (in the workspace) whose creation lets the first call of ``held_steps`` end."""


def held_steps(count: int) -> list[dict]:
    """``count`` terminal calls; the first runs until the test creates ``RELEASE`` in the
    workspace, so what the test sends meanwhile meets a call in progress however slowly the
    machine runs (a ``sleep`` of a fixed length may end first on a loaded one)."""
    hold = f"until [ -e {RELEASE} ]; do sleep 0.05; done; echo step 0"
    commands = [hold, *(f"echo step {i}" for i in range(1, count))]
    return [{"tool_calls": [{"name": "terminal", "arguments": {"command": c}}]} for c in commands]


def release(tmp_path: Path) -> None:
    (tmp_path / "workspace" / RELEASE).touch()  # settings_for's workspace


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_store_url(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    with fresh_schema_url("treadle_xproc") as url:
        yield url


@pytest.fixture
def two_servers(shared_store_url, tmp_path) -> Iterator[tuple[TreadleClient, TreadleClient]]:
    server_a = ServerProcess(shared_store_url, log_dir=tmp_path).start()
    server_b = ServerProcess(shared_store_url, log_dir=tmp_path).start()
    try:
        with TreadleClient(server_a.base_url) as via_a, TreadleClient(server_b.base_url) as via_b:
            yield via_a, via_b
    finally:
        server_a.stop()
        server_b.stop()
    assert_store_audits_clean(shared_store_url)


def test_a_pause_sent_to_b_stops_the_run_a_holds(two_servers, settings_for, tmp_path):
    via_a, via_b = two_servers
    on_a = via_a.create_conversation(settings_for([*held_steps(10), FINISH]), id="shared")
    on_a.send_message("work slowly")
    on_a.run(wait=False)
    on_b = via_b.conversation("shared")
    wait_until(lambda: bool(on_b.pending_actions()))
    on_b.pause()  # 202
    release(tmp_path)
    assert on_a.wait(timeout_s=30) is Status.PAUSED
    path = on_b.active_path()
    assert isinstance(path[-1], PauseEvent)
    # The pause came during the first call: no second call was made.
    assert sum(1 for event in path if event.kind == "observation") <= 1
    assert on_b.pending_actions() == []


def test_a_reject_sent_to_b_during_a_call_of_a_is_409_and_stores_nothing(
    two_servers, settings_for, tmp_path
):
    via_a, via_b = two_servers
    on_a = via_a.create_conversation(settings_for([*held_steps(2), FINISH]), id="shared")
    on_a.send_message("work slowly")
    on_a.run(wait=False)
    on_b = via_b.conversation("shared")
    wait_until(lambda: bool(on_b.pending_actions()))
    with pytest.raises(RemoteError) as caught:
        on_b.reject(reason="no")
    assert caught.value.status == 409
    release(tmp_path)
    assert on_a.wait(timeout_s=30) is Status.FINISHED
    assert on_b.count(kinds=["user_rejection"]) == 0
    assert on_b.audit().violations == []


def test_a_message_sent_to_b_during_a_call_is_stored_after_its_result(
    two_servers, settings_for, tmp_path
):
    via_a, via_b = two_servers
    on_a = via_a.create_conversation(settings_for([*held_steps(3), FINISH]), id="shared")
    on_a.send_message("work slowly")
    on_a.run(wait=False)
    on_b = via_b.conversation("shared")
    wait_until(lambda: bool(on_b.pending_actions()))
    answer = httpx.post(
        f"{via_b.api.base_url}/api/conversations/shared/messages", json={"text": "also say hello"}
    )
    assert answer.status_code == 202, answer.text  # queued: a call is in progress
    message_id = answer.json()["id"]
    release(tmp_path)
    assert on_a.wait(timeout_s=30) is Status.FINISHED
    path = on_b.active_path()
    index = next(i for i, event in enumerate(path) if event.id == message_id)
    assert isinstance(path[index], MessageEvent)
    assert path[index].text == "also say hello"
    assert path[index - 1].kind == "observation"  # never between a call and its result
    assert any(isinstance(event, ActionEvent) for event in path[index:])
    assert on_b.audit().violations == []


def test_delete_and_replace_through_b_while_a_runs_are_409(two_servers, settings_for, tmp_path):
    via_a, via_b = two_servers
    on_a = via_a.create_conversation(settings_for([*held_steps(3), FINISH]), id="shared")
    on_a.send_message("work slowly")
    on_a.run(wait=False)
    on_b = via_b.conversation("shared")
    wait_until(lambda: bool(on_b.pending_actions()))
    archive = httpx.get(f"{via_b.api.base_url}/api/conversations/shared/export/openhands").content
    replace = httpx.post(
        f"{via_b.api.base_url}/api/conversations/import/openhands",
        params={"replace": "true"},
        content=archive,
        headers={"Content-Type": "application/gzip"},
    )
    assert replace.status_code == 409, replace.text
    with pytest.raises(RemoteError) as caught:
        on_b.delete()
    assert caught.value.status == 409
    release(tmp_path)
    assert on_a.wait(timeout_s=30) is Status.FINISHED
    assert on_b.audit().violations == []


def test_a_server_notices_that_its_conversation_was_replaced_elsewhere(two_servers, settings_for):
    via_a, via_b = two_servers
    on_a = via_a.create_conversation(settings_for([{"text": "first"}]), id="shared")
    on_a.send_message("hello")
    assert on_a.run() is Status.FINISHED  # A now holds an object for "shared"
    archive = httpx.get(f"{via_b.api.base_url}/api/conversations/shared/export/openhands").content
    replaced = httpx.post(
        f"{via_b.api.base_url}/api/conversations/import/openhands",
        params={"replace": "true"},
        content=archive,
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["results"][0]["replaced"] is True
    # The imported conversation has no runtime settings: A must not run its old object on it.
    with pytest.raises(RemoteError) as caught:
        on_a.run()
    assert (caught.value.status, caught.value.code) == (409, "not_runnable")
    # Deleted and created again with other settings: A runs the new one.
    via_b.conversation("shared").delete()
    again = via_b.create_conversation(settings_for([{"text": "second"}]), id="shared")
    again.send_message("hello again")
    assert on_a.run() is Status.FINISHED
    texts = [e.text for e in on_a.active_path() if isinstance(e, MessageEvent)]
    assert texts[-1] == "second"
