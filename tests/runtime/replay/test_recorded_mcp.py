"""REPLAY-RECORDED with MCP servers: no server is started (sandboxed or not, the replay runs
nothing); the calls are validated against the recorded tool schemas and answered with the
recorded results, so the replay comes out the same even once the server's script is gone."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from support.processes import host_pids_with
from support.replays import FINISH, call, calls, recorded
from treadle.events.model import AgentErrorEvent, ObservationEvent
from treadle.runtime.replay import replay_recorded
from treadle.runtime.replay.rerun_mode import rerun
from treadle.runtime.workspace.sandbox import SANDBOX_HOME

SERVER = Path(__file__).parents[2] / "support" / "mcp_server.py"


def test_a_recorded_replay_starts_no_mcp_server_and_comes_out_the_same(
    store, workspace, tmp_path
) -> None:
    script = tmp_path / "replayed-mcp-server" / "server.py"
    script.parent.mkdir()
    shutil.copy(SERVER, script)
    starts = tmp_path / "server-starts.txt"
    started = f"echo started >> {starts}; exec {sys.executable} {script}"
    servers = {
        "demo": {"command": "/bin/bash", "args": ["-c", started]},
        "gone": {"command": str(tmp_path / "no-such-server")},
    }
    responses = [
        calls(call("mcp__demo__echo", {"text": "hi"})),
        calls(call("mcp__demo__echo", {"txt": "misspelt"})),  # refused by the schema
        calls(call("mcp__gone__anything", {})),  # its server did not start
        FINISH,
    ]
    conversation = recorded(
        store, workspace, responses, mcp_servers=servers, sandbox={"kind": "none"}
    )
    path = store.path_to_root(conversation, store.head(conversation))
    answers = [e for e in path if isinstance(e, ObservationEvent | AgentErrorEvent)]
    assert answers[0].content == "echo from MCP: hi"
    assert "Invalid arguments for mcp__demo__echo" in answers[1].error
    assert "'gone' did not start" in answers[2].error
    assert starts.read_text().splitlines() == ["started"]
    assert host_pids_with(str(script)) == []

    report = replay_recorded(store, conversation)
    assert report.divergences == []
    assert starts.read_text().splitlines() == ["started"]  # not started again

    shutil.rmtree(script.parent)
    report = replay_recorded(store, conversation)
    assert report.same, report.divergences
    assert report.replayed_events == report.recorded_events == len(path)
    assert starts.read_text().splitlines() == ["started"]


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")
def test_a_rerun_starts_the_mcp_servers_sandboxed_as_the_run_was(
    store, workspace, tmp_path
) -> None:
    script = tmp_path / "rerun-mcp-server" / "server.py"
    script.parent.mkdir()
    shutil.copy(SERVER, script)
    servers = {"demo": {"command": sys.executable, "args": [str(script)]}}
    responses = [calls(call("mcp__demo__env_value", {"name": "HOME"})), FINISH]
    conversation = recorded(
        store, workspace, responses, mcp_servers=servers, sandbox={"kind": "bubblewrap"}
    )

    report = rerun(store, conversation, into=tmp_path / "rerun")
    assert report.same, report.divergences
    path = store.path_to_root(report.new_conversation, store.head(report.new_conversation))
    (home,) = [
        e.content
        for e in path
        if isinstance(e, ObservationEvent) and e.tool_name == "mcp__demo__env_value"
    ]
    assert home == SANDBOX_HOME  # the server's own HOME: it ran inside the sandbox
    assert host_pids_with(str(script)) == []
