"""A command's output while it runs, through a real server and WebSocket clients: it arrives
before the command ends, masked, as transient frames that are never stored; a client that
reads nothing does not hold the run up; the server's threads return to their baseline."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.api.stream import EventFrame, OutputFrame, RunFinishedFrame
from treadle.client import TreadleClient
from treadle.store.urls import open_store

HELD_COMMAND = "echo live-$((20+22)); until [ -e release ]; do sleep 0.05; done; echo done-$((1+1))"
"""Prints, waits until the test creates ``release`` in the workspace, prints; what it prints
is not in the command (so not in the stored action)."""


def terminal_then_finish(command: str) -> list[dict]:
    return [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
    ]


WATCHDOG_S = 180
"""How long a test reads frames before it gives up on the run finishing: generous, as a sandbox's
start and a run take many times longer on a loaded machine (CI beside CPU burners)."""


def collect_frames(subscription, until_finished: bool = True, on_frame=None, on_joined=None):
    """(arrival time, typed frame) until the run finishes (a watchdog bounds the wait);
    ``on_frame`` is called with each frame as it arrives, ``on_joined`` once, at the first:
    the server has this client among its stream's listeners then (it joins them before it
    sends what is stored), so live output made after it reaches this client."""
    watchdog = threading.Timer(WATCHDOG_S, subscription.close)
    watchdog.start()
    seen = []
    try:
        for frame in subscription.frames():
            if not seen and on_joined is not None:
                on_joined()
            seen.append((time.monotonic(), frame))
            if on_frame is not None:
                on_frame(frame)
            if isinstance(frame, RunFinishedFrame) and until_finished:
                break
    finally:
        watchdog.cancel()
        subscription.close()
    return seen


def server_threads(server: ServerProcess) -> int:
    assert server.process is not None
    return len(os.listdir(f"/proc/{server.process.pid}/task"))


def test_output_reaches_a_client_before_the_command_ends_and_is_never_stored(
    client, server, settings_for, tmp_path
):
    conversation = client.create_conversation(settings_for(terminal_then_finish(HELD_COMMAND)))
    conversation.send_message("print, wait, print")
    threads_before = server_threads(server)
    subscription = conversation.subscribe()
    release = tmp_path / "workspace" / "release"  # settings_for's workspace

    received: list[str] = []

    def let_the_command_end(frame) -> None:
        # The command cannot end before the first line reached this client: the line came
        # while it ran, whatever the machine's load (and however its output was cut in frames).
        if isinstance(frame, OutputFrame):
            received.append(frame.text)
            if "live-42" in "".join(received):
                release.touch()

    # Run once this client follows the stream: a frame of live output made before it joined
    # never reaches it (live only), and the command would wait for the release until its
    # timeout (seen beside CPU burners: no output frame at all).
    seen = collect_frames(
        subscription,
        on_frame=let_the_command_end,
        on_joined=lambda: conversation.run(wait=False),
    )

    assert release.exists(), (
        "the first line never reached the client before the run ended: "
        f"{[type(frame).__name__ for _, frame in seen]}, output {received}"
    )
    outputs = [frame for _, frame in seen if isinstance(frame, OutputFrame)]
    result = next(
        frame
        for _, frame in seen
        if isinstance(frame, EventFrame) and frame.event["kind"] == "observation"
    )
    assert all(frame.action_id == result.answers for frame in outputs)
    assert all(frame.tool_name == "terminal" and not frame.stored for frame in outputs)
    assert "".join(frame.text for frame in outputs) == "live-42\ndone-2\n"
    assert subscription.live_output == {}  # the stored result replaced it

    # Nothing transient in the store: every stored event came as an event frame, and the
    # output is in the observation only, unchanged.
    store = open_store(server.store_url)
    try:
        stored = store.get_range(conversation.id, 0, 10_000)
    finally:
        store.close()
    event_frames = [frame for _, frame in seen if isinstance(frame, EventFrame)]
    assert [item.seq for item in stored] == [frame.seq for frame in event_frames]
    for item in stored:
        assert '"stored"' not in (item.payload or "")
        assert item.event.kind != "output"
    holding = [item.event for item in stored if "live-42" in (item.payload or "")]
    assert [event.kind for event in holding] == ["observation"]
    assert holding[0].content.startswith("live-42\ndone-2\n[exit code 0")

    # A client that connects after the run replays stored frames only.
    replayed = collect_frames(conversation.subscribe(), until_finished=True)
    assert not any(isinstance(frame, OutputFrame) for _, frame in replayed)
    # No thread of the run, the stream or the live output is left behind once the
    # conversation is closed (its shell outlives the run: docs/sandbox.md, Lifetime), but the
    # process-wide thread that forks every sandbox (workspace.spawner), started by the first.
    conversation.delete()
    wait_until(lambda: server_threads(server) <= threads_before + 1, 30, "threads back to baseline")


@pytest.fixture
def keyed_server(store_url: str, tmp_path: Path):
    process = ServerProcess(store_url, api_keys=("key-Zq7Xw9Lp2Vb4Nm8K",), log_dir=tmp_path)
    yield process.start()
    process.stop()


def test_a_secret_in_the_output_is_masked_in_every_frame(keyed_server, settings_for, tmp_path):
    secret = "key-Zq7Xw9Lp2Vb4Nm8K"  # a client key: this server masks it in tool output
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "key.txt").write_text(secret)
    # Once the client follows the stream (output frames are live only: a client that joins
    # later never gets them), the key's first 9 characters, a pause long enough for a frame,
    # then the rest.
    command = (
        "until [ -e release ]; do sleep 0.05; done; "
        "echo start; head -c 9 key.txt; sleep 0.6; tail -c +10 key.txt; echo; sleep 1"
    )
    release = workspace / "release"

    def release_once_joined(_frame) -> None:
        release.touch()  # any frame: the client has joined the conversation's stream

    with TreadleClient(keyed_server.base_url, api_key=secret) as client:
        conversation = client.create_conversation(settings_for(terminal_then_finish(command)))
        conversation.send_message("print the key")
        subscription = conversation.subscribe()
        conversation.run(wait=False)
        seen = collect_frames(subscription, on_frame=release_once_joined)
    texts = [frame.text for _, frame in seen if isinstance(frame, OutputFrame)]
    assert "".join(texts) == "start\n<secret:TREADLE_SERVER_API_KEY_1>\n"
    for text in texts:
        assert "key-Z" not in text
        assert "Zq7X" not in text


def test_a_client_that_reads_nothing_does_not_hold_the_run_up(client, server, settings_for):
    # About 3 s of steady output: ten frames a second the whole time.
    command = "for i in $(seq 1 60); do seq 1 400; sleep 0.05; done; echo end"
    conversation = client.create_conversation(settings_for(terminal_then_finish(command)))
    conversation.send_message("print a lot")
    url = client.api.ws_url(f"/api/conversations/{conversation.id}/events/stream")
    # max_queue=1: the client takes one message and then leaves the rest in the socket.
    with connect(url, max_queue=1) as unread:
        reader = conversation.subscribe()
        started = time.monotonic()
        conversation.run(wait=False)
        seen = collect_frames(reader)
        took = time.monotonic() - started
        first = json.loads(unread.recv(timeout=5))
        assert first["type"] == "event"
        assert first["seq"] == 0
    assert took < 20, took  # the run went at its own pace
    outputs = [frame for _, frame in seen if isinstance(frame, OutputFrame)]
    assert 10 <= len(outputs) <= 60  # bounded: about ten a second, not one per read
    assert max(len(frame.text) for frame in outputs) <= 4096
    finished = [frame for _, frame in seen if isinstance(frame, RunFinishedFrame)]
    assert finished
    assert finished[-1].status == "finished"
