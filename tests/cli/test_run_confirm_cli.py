"""Confirmation at the command line (issue 26): through a real pty, confirming the ``finish``
call ends the run (it never asks the model again) and ``--max-steps`` counts model calls
across confirmations; without a terminal, ``treadle confirm``/``treadle reject`` answer the
waiting calls as the server's confirm does. And (issue 28) SIGTERM during the command line's
start-up exits 143 with one line, never a traceback; a message queued while ``treadle run``
runs its last batch is stored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from support.cli import invoke_treadle, run_in_pty
from support.waiting import wait_until
from treadle.runtime.conversation import Conversation
from treadle.runtime.status import ConversationStatus
from treadle.store.urls import open_store


def _script(folder: Path, responses: list[dict]) -> Path:
    path = folder / "script.json"
    path.write_text(json.dumps({"responses": responses}))
    return path


def _think(number: int) -> dict:
    return {"tool_calls": [{"name": "think", "arguments": {"thought": f"step {number}"}}]}


FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def test_confirming_finish_at_the_prompt_ends_the_run(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    script = _script(tmp_path, [_think(0), FINISH, _think(99)])
    code, shown = run_in_pty(
        [
            "run",
            "think",
            "--script",
            str(script),
            "--workspace",
            str(workspace),
            "--confirm",
            "always",
            "--sandbox",
            "none",
            "--store",
            store_url,
        ]
    )
    assert code == 0, shown
    assert shown.count("[y/n]") == 2, shown  # think, then finish: never asked again
    assert "response 3" not in shown
    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
        with Conversation.open(store, info.id) as conversation:
            assert conversation.stored_status()[0] is ConversationStatus.FINISHED
            assert conversation.model_responses() == 2
    finally:
        store.close()


def test_max_steps_counts_model_calls_across_confirmations(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    script = _script(tmp_path, [_think(n) for n in range(6)] + [FINISH])
    code, shown = run_in_pty(
        [
            "run",
            "think",
            "--script",
            str(script),
            "--workspace",
            str(workspace),
            "--confirm",
            "always",
            "--max-steps",
            "2",
            "--sandbox",
            "none",
            "--store",
            store_url,
        ]
    )
    assert code == 3, shown  # stopped before the end
    assert shown.count("[y/n]") == 2, shown
    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
        with Conversation.open(store, info.id) as conversation:
            assert conversation.model_responses() == 2  # was 7 with --max-steps 2
    finally:
        store.close()


def test_confirm_and_reject_without_a_terminal(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    two = {
        "tool_calls": [
            {"name": "terminal", "arguments": {"command": "echo a > a.txt"}, "id": "ca"},
            {"name": "terminal", "arguments": {"command": "echo b > b.txt"}, "id": "cb"},
        ]
    }
    script = _script(tmp_path, [two, FINISH])
    common = ("--store", store_url)
    first = invoke_treadle(
        "run",
        "write",
        "--script",
        str(script),
        "--workspace",
        str(workspace),
        "--confirm",
        "always",
        "--sandbox",
        "none",
        *common,
    )
    assert first.returncode == 3, first.stdout + first.stderr
    assert "treadle confirm" in first.stdout
    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
    finally:
        store.close()
    confirmed = invoke_treadle("confirm", info.id, "ca", *common)
    assert confirmed.returncode == 3, confirmed.stdout + confirmed.stderr  # cb still waits
    assert (workspace / "a.txt").exists()
    assert not (workspace / "b.txt").exists()
    # The conversation by a prefix of its id, the call by a prefix of its action id.
    store = open_store(store_url)
    try:
        with Conversation.open(store, info.id) as opened:
            (waiting,) = opened.pending_actions()
    finally:
        store.close()
    unknown = invoke_treadle("reject", info.id[:8], "zzzzzz", *common)
    assert unknown.returncode == 2
    assert waiting.id in unknown.stderr  # refused, naming what does wait
    rejected = invoke_treadle("reject", info.id[:8], waiting.id[:10], "--reason", "not b", *common)
    assert rejected.returncode == 3, rejected.stdout + rejected.stderr  # idle: run to go on
    assert f"treadle run --conversation {info.id}" in rejected.stdout
    again = invoke_treadle("reject", info.id, *common)
    assert again.returncode == 2
    assert "no call is waiting for confirmation" in again.stderr
    finished = invoke_treadle("run", "--conversation", info.id, *common)
    assert finished.returncode == 3  # finish waits for confirmation too
    assert invoke_treadle("confirm", info.id, *common).returncode == 0


def _catches(pid: int, number: int) -> bool:
    """Whether process ``pid`` has a handler for signal ``number`` (its code is running: the
    interpreter itself dies of any signal before that)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while read
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (number - 1) & 1)


def test_sigterm_during_start_up_exits_cleanly(tmp_path):
    env = {**os.environ, "TREADLE_STORE": f"sqlite:///{tmp_path / 'store.db'}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "treadle", "conversations"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    # As soon as Treadle's first code runs (the command line's modules still loading).
    wait_until(lambda: _catches(process.pid, signal.SIGTERM) or process.poll() is not None)
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert process.returncode in (0, 143), (process.returncode, err)  # never -15
    if process.returncode == 143:
        assert err.strip() == "treadle: stopped by SIGTERM"


SWALLOWED_STOP = """
import os, signal, sys, weakref
from treadle import entry

class Thing:
    pass

def command():
    thing = Thing()
    def callback(_ref):  # the signal's handler runs in here, where Python ignores exceptions
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))
    ref = weakref.ref(thing, callback)
    del thing
    print("went on")

entry.install_startup_signals()
entry.run(command)
"""


def test_a_stop_python_swallows_still_ends_the_program_cleanly():
    """A start-up signal handled inside a weak reference's callback (importlib's module locks
    have one: seen under load) raised where Python only prints it, and the command went on
    with a traceback on stderr; now it ends with the stop's code and its one line."""
    done = subprocess.run(
        [sys.executable, "-c", SWALLOWED_STOP], capture_output=True, text=True, timeout=60
    )
    assert done.stderr == "treadle: stopped by SIGTERM\n"
    assert done.returncode == 143


def test_a_message_queued_during_the_last_batch_is_stored(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    slow = {"tool_calls": [{"name": "terminal", "arguments": {"command": "touch go; sleep 2"}}]}
    script = _script(tmp_path, [slow, FINISH])
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "treadle",
            "run",
            "slow",
            "--script",
            str(script),
            "--workspace",
            str(workspace),
            "--sandbox",
            "none",
            "--store",
            store_url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_until(lambda: (workspace / "go").exists(), 60)
        store = open_store(store_url)
        try:
            (info,) = store.list_conversations()
            with Conversation.open(store, info.id) as other:
                queued = other.queue_message("one more thing")
        finally:
            store.close()
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out + err
    store = open_store(store_url)
    try:
        path = store.path_to_root(info.id, store.head(info.id))
        assert any(event.id == queued.id for event in path)  # stored, not left queued
    finally:
        store.close()
