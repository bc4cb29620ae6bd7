"""``treadle run`` with a scripted model and ``treadle demo``, as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from support.cli import invoke_treadle
from support.fake_openai import FakeOpenAIServer
from support.processes import alive, host_pids_with
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.events.audit import audit_events
from treadle.events.projection import project_messages
from treadle.runtime.conversation import Conversation
from treadle.runtime.status import read_status
from treadle.store.leases import SERVER, open_leases, sqlite_leases_path
from treadle.store.urls import open_store


def treadle(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """In this process (what a run prints and stores); the tests about signals and a killed
    run start it as a process (``_start_run``)."""
    return invoke_treadle(*args, env=env, columns=200, drop=())


def test_run_with_a_script_shows_events_and_a_summary(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [
                    {
                        "tool_calls": [
                            {
                                "name": "terminal",
                                "arguments": {
                                    "command": "echo $TREADLE_API_KEY; echo made > out.txt"
                                },
                            }
                        ]
                    },
                    {"tool_calls": [{"name": "finish", "arguments": {"message": "wrote out.txt"}}]},
                ]
            }
        )
    )
    workspace = tmp_path / "ws"
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    result = treadle(
        "run",
        "write out.txt",
        "--create-workspace",
        "--workspace",
        str(workspace),
        "--script",
        str(script),
        "--store",
        store_url,
        env={"TREADLE_API_KEY": "sk-never-stored-123"},
    )
    assert result.returncode == 0, result.stderr
    assert "status: finished" in result.stdout
    assert "observation" in result.stdout
    assert (workspace / "out.txt").read_text() == "made\n"
    assert "sk-never-stored-123" not in result.stdout
    store = open_store(store_url)
    (info,) = store.list_conversations()
    events = [item.event for item in store.get_range(info.id, 0, 1000)]
    store.close()
    assert audit_events(events).clean
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert "sk-never-stored-123" not in dumped
    assert "<secret:TREADLE_API_KEY>" not in dumped  # the model's key never reaches bash
    assert info.metadata["settings"]["model"]["kind"] == "scripted"


def test_run_without_a_model_is_a_clear_error(tmp_path):
    result = treadle(
        "run",
        "x",
        "--create-workspace",
        "--workspace",
        str(tmp_path),
        "--store",
        f"sqlite:///{tmp_path / 'x.db'}",
        env={"TREADLE_MODEL": ""},
    )
    assert result.returncode == 2
    assert "--model" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_runs_offline_and_ends_clean(tmp_path):
    result = treadle("demo", "--store", f"sqlite:///{tmp_path / 'demo.db'}")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "pending now" in out  # the second call confirmed first: the first still pending
    assert "agent_error" in out
    assert "clean: 0 violations" in out
    assert "5 actions in, 5 calls out" in out
    assert "status: finished" in out


# -- runs that end badly (issue 10, items 7, 17, 25) -------------------------------------------


def _start_run(tmp_path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``treadle run`` in the background on a fresh store; ``args`` choose the model."""
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "treadle",
            "run",
            "go",
            "--create-workspace",
            "--workspace",
            str(tmp_path / "ws"),
            "--store",
            store_url,
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "COLUMNS": "200", "TREADLE_API_KEY": ""},
    )
    return process, store_url


def _litellm(server) -> tuple[str, ...]:
    return ("--model", "openai/test-model", "--base-url", server.base_url)


def _script(tmp_path, *commands: str) -> tuple[str, ...]:
    calls = [{"tool_calls": [{"name": "terminal", "arguments": {"command": c}}]} for c in commands]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [*calls, {"text": "done"}]}))
    return ("--script", str(script))


def _wait_until(ready, process) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run never got there"
        time.sleep(0.05)


def _stored(store_url: str):
    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
        return info, [item.event for item in store.get_range(info.id, 0, 10**6)]
    finally:
        store.close()


def _check_stopped(process, store_url: str, signal_name: str) -> list:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 3, out + err
    assert "Traceback" not in err
    info, events = _stored(store_url)
    assert f"conversation: {info.id}" in out
    assert f"stopped by {signal_name}" in out
    reason = f"stopped by {signal_name}; run again to continue"
    assert read_status_of(store_url, info.id) == ("paused", reason)
    assert audit_events(events).clean
    leases = open_leases(store_url)
    assert not leases.is_held(info.id)  # released on the way out
    leases.close()
    return events


def test_sigint_while_the_model_never_answers_stops_the_run_with_a_summary(tmp_path):
    with FakeOpenAIServer([{"hang": True}]) as server:
        process, store_url = _start_run(tmp_path, *_litellm(server))
        _wait_until(lambda: server.requests, process)
        process.send_signal(signal.SIGINT)
        _check_stopped(process, store_url, "SIGINT")


def test_sigterm_during_a_tool_call_closes_the_call_and_records_the_stop(tmp_path):
    started = tmp_path / "ws" / "started"
    process, store_url = _start_run(tmp_path, *_script(tmp_path, "touch started; sleep 60"))
    _wait_until(started.exists, process)
    process.send_signal(signal.SIGTERM)
    events = _check_stopped(process, store_url, "SIGTERM")
    (closed,) = [e for e in events if e.kind == "agent_error"]
    assert "interrupted" in closed.error


def test_ctrl_c_mid_command_kills_it_and_its_jobs_exits_3_and_the_model_is_told(tmp_path):
    ws = tmp_path / "ws"
    # Found on the host by their sleep arguments: sandboxed, $$ and $! are the sandbox's pids.
    markers = ("sleep 60.75", "sleep 300.75")
    command = (
        f"{markers[1]} & echo $! > bg.pid; bash -c 'echo $$ > fg.pid; exec {markers[0]}'; "
        "touch ran-on"
    )
    process, store_url = _start_run(tmp_path, *_script(tmp_path, command))
    _wait_until(lambda: (ws / "bg.pid").exists() and (ws / "fg.pid").exists(), process)
    _wait_until(lambda: all(host_pids_with(marker) for marker in markers), process)
    pids = [pid for marker in markers for pid in host_pids_with(marker)]
    process.send_signal(signal.SIGINT)
    events = _check_stopped(process, store_url, "SIGINT")
    assert not any(alive(pid) for pid in pids)  # gone before the process exited
    assert not (ws / "ran-on").exists()
    (closed,) = [e for e in events if e.kind == "agent_error"]
    assert closed.interrupted == "user"
    assert "interrupted by the user" in closed.error

    info, _events = _stored(store_url)
    again = treadle("run", "--conversation", info.id, "--store", store_url)
    assert again.returncode == 0, again.stdout + again.stderr
    _info, events = _stored(store_url)
    assert audit_events(events).clean
    store = open_store(store_url)
    try:
        path = store.path_to_root(info.id, store.head(info.id))
    finally:
        store.close()
    (tool_message,) = [m for m in project_messages(path) if m["role"] == "tool"]
    assert tool_message["content"] == closed.error


def test_an_interrupt_recorded_by_another_process_stops_a_cli_run(tmp_path):
    ws = tmp_path / "ws"
    process, store_url = _start_run(tmp_path, *_script(tmp_path, "touch started; sleep 60"))
    _wait_until((ws / "started").exists, process)
    info, _events = _stored(store_url)
    store = open_store(store_url)
    try:
        with Conversation.open(store, info.id) as other:
            sent = time.monotonic()
            other.interrupt()  # recorded in the log, as a server sharing the store does
    finally:
        store.close()
    out, err = process.communicate(timeout=30)
    # Seconds (the watcher's second, then the process's exit), not the command's 60.
    assert time.monotonic() - sent < 20
    assert process.returncode == 3, out + err
    _info, events = _stored(store_url)
    assert audit_events(events).clean
    (closed,) = [e for e in events if e.kind == "agent_error"]
    assert closed.interrupted == "user"
    assert read_status_of(store_url, info.id)[1].startswith("interrupted by the user")


def test_the_model_deadline_bounds_a_provider_that_never_answers_and_retries_are_shown(tmp_path):
    replies = [{"status": 429, "retry_after": 0}, {"hang": True}, {"hang": True}]
    with FakeOpenAIServer(replies) as server:
        # 8 s: LiteLLM's first call in a fresh process is slow on a loaded machine, and the
        # 429 must be answered and retried within the deadline for the notice to show.
        process, store_url = _start_run(tmp_path, *_litellm(server), "--model-deadline", "8")
        # generous: LiteLLM's import alone took 30 s in a loaded CI run (the 8 s are shown)
        out, err = process.communicate(timeout=240)
    assert process.returncode == 1, out + err
    assert "rate limited" in out
    assert "attempt 2 of 5" in out  # the retry was said on screen
    assert "within its deadline of 8 s" in out
    info, _events = _stored(store_url)
    assert read_status_of(store_url, info.id)[0] == "error"


def test_a_store_that_fails_mid_run_ends_with_one_line_not_a_traceback(tmp_path):
    db = tmp_path / "run.db"
    drop = f"python3 -c \"import sqlite3; sqlite3.connect('{db}').execute('DROP TABLE events')\""
    # Unsandboxed on purpose: a sandboxed shell cannot see the store (test_sandbox_escape.py).
    process, _store_url = _start_run(tmp_path, *_script(tmp_path, drop), "--sandbox", "none")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1, out + err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: the run of conversation ")
    assert "stopped: " in line


def test_a_killed_cli_run_shows_as_interrupted_and_no_server_takes_it_over(tmp_path):
    started = tmp_path / "ws" / "started"
    process, store_url = _start_run(tmp_path, *_script(tmp_path, "touch started; sleep 60"))
    _wait_until(started.exists, process)
    process.kill()
    process.wait()
    info, _events = _stored(store_url)
    with sqlite3.connect(sqlite_leases_path(tmp_path / "run.db")) as conn:
        (owner,) = conn.execute("SELECT owner FROM run_leases").fetchone()
        assert owner.startswith("cli-")
        conn.execute("UPDATE run_leases SET expires_at = 0")  # as if its TTL had passed
    leases = open_leases(store_url)
    assert leases.expired() == [info.id]
    assert leases.expired(kind=SERVER) == []  # a server never takes over a CLI's run
    leases.close()
    served = ServerProcess(store_url, lease_ttl=1, log_dir=tmp_path).start()
    try:
        with TreadleClient(served.base_url) as client:
            seen = client.conversation(info.id).info()
    finally:
        served.stop()
    assert seen.status == "running"
    assert (seen.status_reason or "").startswith("interrupted: ")
    # still the dead CLI's lease: not taken
    with sqlite3.connect(sqlite_leases_path(tmp_path / "run.db")) as conn:
        assert conn.execute("SELECT owner FROM run_leases").fetchone() == (owner,)


def read_status_of(store_url: str, conversation_id: str) -> tuple[str, str | None]:
    store = open_store(store_url)
    try:
        status, reason = read_status(store, conversation_id)
        return status.value, reason
    finally:
        store.close()
