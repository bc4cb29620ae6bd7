"""Issue 10 leftovers in a real server's run management: a takeover it refuses is decided once
and visible, a clean stop pauses with its own reason, and the server's client API keys are
masked in every conversation's tool output."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.api import ConversationView
from treadle.client import TreadleClient
from treadle.events.model import ROOT, MessageEvent, StateChangeEvent
from treadle.runtime.requests import USER_INTERRUPT, USER_PAUSE, pause_request_event
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.status import read_status, status_event
from treadle.server.runs import SERVER_STOPPED
from treadle.store.leases import SERVER, new_owner, open_leases
from treadle.store.urls import open_store

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def _left_running(store_url: str, conversation_id: str, settings: ConversationSettings) -> None:
    """A conversation as a server that crashed mid-run leaves it: status running, a user
    message, and the dead server's lease already expired."""
    store = open_store(store_url)
    leases = open_leases(store_url)
    try:
        store.create_conversation(conversation_id, metadata={"settings": settings.to_metadata()})
        store.append(conversation_id, MessageEvent(source="user", text="go", parent_id=ROOT))
        head = store.head(conversation_id) or ROOT
        store.append(conversation_id, status_event(Status.RUNNING, head), move_head=False)
        assert leases.acquire(conversation_id, new_owner(SERVER), 0.001)
    finally:
        leases.close()
        store.close()


def _wait_for_status(client: TreadleClient, conversation_id: str, wanted: str) -> ConversationView:
    views: list[ConversationView] = []

    def reached() -> bool:
        views.append(client.conversation(conversation_id).info())
        return views[-1].status == wanted

    wait_until(reached, what=f"status {wanted} of {conversation_id}")
    return views[-1]


def test_a_takeover_this_server_refuses_is_recorded_once(store_url: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "inside").mkdir(parents=True)
    script = tmp_path / "script.json"  # outside the root
    script.write_text(json.dumps({"responses": [FINISH]}))
    # Not runnable here: a workspace outside --workspace-root, a script file outside it (a
    # server takes scripted responses inline). Runnable: inline responses inside the root.
    moved = ConversationSettings.scripted_inline([FINISH], tmp_path / "elsewhere")
    scripted_file = ConversationSettings.scripted(script, root / "inside")
    runnable = ConversationSettings.scripted_inline([FINISH], root / "inside")
    _left_running(store_url, "moved", moved)
    _left_running(store_url, "script-file", scripted_file)
    _left_running(store_url, "runnable-1", runnable)
    server = ServerProcess(store_url, lease_ttl=0.6, log_dir=tmp_path, workspace_root=root)
    server.start()
    try:
        with TreadleClient(server.base_url) as client:
            for conversation_id in ("moved", "script-file"):
                view = _wait_for_status(client, conversation_id, "error")
                assert "will not take the run over" in (view.status_reason or "")
            assert "outside" in (client.conversation("moved").info().status_reason or "")
            _wait_for_status(client, "runnable-1", "finished")
            # A conversation left later is taken over in a later cycle of the watcher: the
            # refused ones were met (at most) once more by then, and must not be retried.
            _left_running(store_url, "runnable-2", runnable)
            _wait_for_status(client, "runnable-2", "finished")
    finally:
        server.stop()
    log = (tmp_path / f"server-{server.port}.log").read_text()
    for conversation_id in ("moved", "script-file"):
        mentions = [line for line in log.splitlines() if f" {conversation_id}" in line]
        assert len(mentions) == 1, mentions
        # (a worker's log lines start with "[worker N] WARNING:")
        assert "not taking over conversation" in mentions[0], mentions
    assert "Traceback" not in log
    leases = open_leases(store_url)
    try:
        assert leases.expired() == []  # the dead holders' leases were cleared, not left
    finally:
        leases.close()


def _recorded(store_url: str, conversation_id: str, *events: StateChangeEvent) -> None:
    store = open_store(store_url)
    try:
        for event in events:
            store.append(conversation_id, event, move_head=False)
    finally:
        store.close()


def test_a_pause_asked_of_a_run_whose_server_died_is_honoured_by_the_takeover(
    store_url: str, tmp_path: Path
) -> None:
    """The dead server recorded the user's pause (or interrupt) in the log, and died before
    its next safe point: the server that takes the run over pauses it. A request an earlier
    run already honoured is not this run's."""
    settings = ConversationSettings.scripted_inline([FINISH], tmp_path)
    for key in ("paused", "interrupted", "unasked", "asked-before"):
        _left_running(store_url, key, settings)
    _recorded(store_url, "paused", pause_request_event(ROOT))
    _recorded(store_url, "interrupted", pause_request_event(ROOT, "interrupt"))
    # asked-before: a pause honoured by an earlier run (PAUSED), then a new run that died.
    _recorded(
        store_url,
        "asked-before",
        pause_request_event(ROOT),
        status_event(Status.PAUSED, ROOT, USER_PAUSE),
        status_event(Status.RUNNING, ROOT),
    )
    server = ServerProcess(store_url, lease_ttl=0.6, log_dir=tmp_path)
    server.start()
    try:
        with TreadleClient(server.base_url) as client:
            assert _wait_for_status(client, "paused", "paused").status_reason == USER_PAUSE
            view = _wait_for_status(client, "interrupted", "paused")
            assert view.status_reason == USER_INTERRUPT
            _wait_for_status(client, "unasked", "finished")
            _wait_for_status(client, "asked-before", "finished")
    finally:
        server.stop()


def test_a_server_stop_pauses_runs_with_its_own_reason(
    server: ServerProcess, client: TreadleClient, store_url: str, settings_for
) -> None:
    slow = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": f"sleep 0.2; echo {i}"}}]}
        for i in range(50)
    ]
    settings = settings_for([*slow, FINISH])
    conversation = client.create_conversation(settings, id="stopped")
    conversation.send_message("work")
    conversation.run(wait=False)
    _wait_for_status(client, "stopped", "running")
    server.stop()
    store = open_store(store_url)
    try:
        assert read_status(store, "stopped") == (Status.PAUSED, SERVER_STOPPED)
        kinds = [stored.event.kind for stored in store.get_range("stopped", 0, 10**6)]
        # No pause request in the log: the stop was the server's, not a user's.
        requests = [
            stored.event
            for stored in store.get_range("stopped", 0, 10**6)
            if stored.event.kind == "state_change" and stored.event.key == "pause_request"
        ]
    finally:
        store.close()
    assert "pause" in kinds
    assert requests == []


def test_the_servers_api_keys_are_masked_in_tool_output(
    store_url: str, tmp_path: Path, settings_for
) -> None:
    key = "client-api-key-0123456789abcdef"
    other = "second-client-key-fedcba987654"
    workspace = tmp_path / "workspace"  # settings_for's
    workspace.mkdir(exist_ok=True)
    (workspace / "key.txt").write_text(key)  # as an operator's key file the agent could read
    command = f"cat key.txt; echo; base64 key.txt; echo {other}"
    settings = settings_for(
        [{"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}, FINISH]
    )
    server = ServerProcess(store_url, log_dir=tmp_path, api_keys=(key, other)).start()
    try:
        with TreadleClient(server.base_url, api_key=key) as client:
            conversation = client.create_conversation(settings, id="keys")
            conversation.send_message("read the key")
            assert conversation.run() == "finished"
            outputs = [e.content for e in conversation.active_path() if e.kind == "observation"]
    finally:
        server.stop()
    terminal = outputs[0]
    for secret in (key, other, base64.b64encode(key.encode()).decode()):
        assert secret not in terminal
    assert terminal.count("<secret:TREADLE_SERVER_API_KEY_1>") == 2  # plain and base64
    assert "<secret:TREADLE_SERVER_API_KEY_2>" in terminal
