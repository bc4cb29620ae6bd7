"""``RemoteConversation.wait`` against a run whose last status is stored before its thread lets
go of the conversation: the wait ends on that run's end, not at its deadline.

The window (the run's final status stored, the server not yet saying the run let go) is a few
milliseconds; CI hit it twice (a wait ran to its 300 s deadline). Here the run's thread is held
in that window until the wait follows the stream, so the order is certain, not timing luck.
The server is the real app on a real socket, in this process so that the window can be held.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from support.server_process import unassigned_port
from support.waiting import wait_until
from treadle.client import TreadleClient
from treadle.client.conversation import RemoteConversation
from treadle.events.model import MessageEvent
from treadle.runtime.status import ConversationStatus
from treadle.server import create_app
from treadle.server.runs import RunManager


@pytest.fixture
def app_and_client(tmp_path: Path) -> Iterator[tuple[object, TreadleClient]]:
    app = create_app(f"sqlite:///{tmp_path / 'wait.db'}")
    port = unassigned_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    wait_until(lambda: server.started)
    try:
        with TreadleClient(f"http://127.0.0.1:{port}") as client:
            yield app, client
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_wait_begun_after_the_runs_last_status_ends_with_the_run(
    app_and_client, settings_for, monkeypatch
):
    app, client = app_and_client
    let_go = hold_runs_after_their_end(monkeypatch)
    conversation = finished_but_held(client, settings_for)
    assert outcome_of_wait(app, conversation, let_go) == [ConversationStatus.FINISHED]


def test_a_wait_ends_with_the_run_when_its_holder_appended_after_its_last_status(
    app_and_client, settings_for, monkeypatch
):
    """The holder stores the messages queued since the run's last safe point after the run's
    final status, before it lets go: the run_finished frame rides on that status, which is no
    longer among the log's last two events. (CI: a 50-conversation test waited 120 s for a
    paused run whose queued message was stored so.)"""
    app, client = app_and_client
    let_go = hold_runs_after_their_end(monkeypatch)
    conversation = finished_but_held(client, settings_for)
    store = app.state.treadle.store  # type: ignore[attr-defined]
    for text in ("queued one", "queued two"):  # as the holder delivers them, before letting go
        store.append(conversation.id, MessageEvent(source="user", text=text))
    assert outcome_of_wait(app, conversation, let_go) == [ConversationStatus.FINISHED]


def hold_runs_after_their_end(monkeypatch) -> threading.Event:
    """Runs' threads wait, once their run ended, until the event returned is set."""
    let_go = threading.Event()
    release = RunManager._deliver_if_free

    def held_after_the_run(self: RunManager, conversation_id: str) -> None:
        if threading.current_thread().name.startswith("treadle-run-"):
            let_go.wait(timeout=60)  # the run ended; its thread still holds the conversation
        release(self, conversation_id)

    monkeypatch.setattr(RunManager, "_deliver_if_free", held_after_the_run)
    return let_go


def finished_but_held(client: TreadleClient, settings_for) -> RemoteConversation:
    """A conversation whose run is stored as finished while its thread still holds it."""
    conversation = client.create_conversation(settings_for([{"text": "done"}]))
    conversation.send_message("hi")
    conversation.run(wait=False)
    wait_until(lambda: conversation.info().status is ConversationStatus.FINISHED)
    assert conversation.info().running_here  # the window: stored as finished, not let go
    return conversation


def outcome_of_wait(app, conversation: RemoteConversation, let_go: threading.Event) -> list:
    """What ``wait`` gives when the run's thread lets go only once the wait follows the
    stream (so the order is certain)."""
    outcome: list[object] = []
    waiter = threading.Thread(target=lambda: outcome.append(_waited(conversation)))
    waiter.start()
    hubs = app.state.treadle.hubs  # type: ignore[attr-defined]
    wait_until(lambda: hubs.listeners(conversation.id) > 0)  # the wait follows the stream now
    let_go.set()
    waiter.join(timeout=90)
    return outcome


def _waited(conversation) -> object:
    try:
        return conversation.wait(timeout_s=20)
    except TimeoutError as error:
        return error
