"""``treadle run --mcp-config``: a real stdio MCP server (tests/support/mcp_server.py) whose tools
the model calls, through the real LiteLLM path and the scripted model; stored with the
conversation, so another process reopening it has them; its secrets never stored in clear."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import invoke_treadle
from support.fake_openai import FakeOpenAIServer
from support.processes import host_pids_with
from support.scripts import write_script
from treadle.events.audit import audit_events
from treadle.store.urls import open_store

SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"
TOKEN = "tok-3f9a-not-for-the-log"

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")


def treadle(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return invoke_treadle(
        *args, env=env, columns=200, drop=("TREADLE_STORE", "TREADLE_MODEL", "DEMO_TOKEN")
    )


def server_script(tmp_path: Path) -> Path:
    """A copy of the test server at a path of this test's own: its processes are found by it."""
    script = tmp_path / "mcp-server-copy" / "server.py"
    script.parent.mkdir()
    shutil.copy(SERVER, script)
    return script


def write_config(tmp_path: Path, servers: dict) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def call(tool: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def stored_events(url: str):
    store = open_store(url)
    try:
        (info,) = store.list_conversations()
        return info, [item.event for item in store.get_range(info.id, 0, info.event_count)]
    finally:
        store.close()


def tool_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def tool_names(request: dict) -> list[str]:
    return [tool["function"]["name"] for tool in request["body"]["tools"]]


def test_the_model_calls_an_mcp_tool_and_another_process_reopening_the_conversation_has_it(
    tmp_path: Path,
) -> None:
    script = server_script(tmp_path)
    config = write_config(
        tmp_path,
        {
            "demo": {
                "command": sys.executable,
                "args": [str(script)],
                "env": {"DEMO_TOKEN": "${DEMO_TOKEN}"},
            }
        },
    )
    url = f"sqlite:///{tmp_path / 'run.db'}"
    replies = [
        call("mcp__demo__echo", text="hi"),
        call("mcp__demo__env_value", name="DEMO_TOKEN"),
        {"text": "done"},
        call("mcp__demo__echo", text="again"),
        {"text": "ok"},
    ]
    with FakeOpenAIServer(replies) as provider:
        first = treadle(
            "run", "use the echo tool", "--create-workspace", "--workspace", str(tmp_path / "ws"),
            "--model", "openai/test-model", "--base-url", provider.base_url,
            "--mcp-config", str(config), "--store", url, env={"DEMO_TOKEN": TOKEN},
        )  # fmt: skip
        assert first.returncode == 0, first.stderr
        requests = list(provider.requests)
        assert "mcp__demo__echo" in tool_names(requests[0])
        assert tool_messages(requests[1]) == ["echo from MCP: hi"]
        # The server got the value; what came back is masked before it is stored or sent.
        assert tool_messages(requests[2])[-1] == "<secret:DEMO_TOKEN>"
        info, _events = stored_events(url)
        stored_env = info.metadata["settings"]["mcp_servers"]["demo"]["env"]
        assert stored_env == {"DEMO_TOKEN": "${DEMO_TOKEN}"}
        database = (tmp_path / "run.db").read_bytes()
        assert TOKEN.encode() not in database
        assert b"${DEMO_TOKEN}" in database
        assert host_pids_with(str(script)) == []  # the server ended with the run

        # Another process, without --mcp-config: the stored settings start the server again.
        second = treadle(
            "run", "once more", "--conversation", info.id, "--store", url,
            env={"DEMO_TOKEN": TOKEN},
        )  # fmt: skip
        assert second.returncode == 0, second.stderr
        requests = provider.requests[3:]
    assert "mcp__demo__echo" in tool_names(requests[0])
    assert tool_messages(requests[1])[-1] == "echo from MCP: again"
    _info, events = stored_events(url)
    assert audit_events(events).clean
    assert TOKEN.encode() not in (tmp_path / "run.db").read_bytes()
    assert host_pids_with(str(script)) == []


def test_a_server_killed_mid_call_or_that_never_starts_is_an_agent_error_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    script = server_script(tmp_path)
    config = write_config(
        tmp_path,
        {
            "demo": {"command": sys.executable, "args": [str(script)]},
            "broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]},
        },
    )
    model = write_script(
        tmp_path,
        [
            call("mcp__demo__echo", text="before"),
            call("mcp__demo__crash"),
            call("mcp__demo__echo", text="after"),
            call("mcp__broken__anything"),
            call("think", thought="the MCP tools are gone; going on"),
            call("finish", message="done"),
        ],
    )
    url = f"sqlite:///{tmp_path / 'run.db'}"
    done = treadle(
        "run", "go", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(model),
        "--mcp-config", str(config), "--store", url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _info, events = stored_events(url)
    assert audit_events(events).clean
    answers = {e.tool_call_id: e for e in events if e.kind in ("observation", "agent_error")}
    by_name = [(e.tool_name, e.kind) for e in answers.values()]
    assert by_name == [
        ("mcp__demo__echo", "observation"),
        ("mcp__demo__crash", "agent_error"),
        ("mcp__demo__echo", "agent_error"),
        ("mcp__broken__anything", "agent_error"),
        ("think", "observation"),
        ("finish", "observation"),
    ]
    errors = [e.error for e in answers.values() if e.kind == "agent_error"]
    assert "MCP server 'demo' closed the connection" in errors[0]
    assert "MCP server 'demo'" in errors[1]
    assert "The MCP server 'broken' did not start" in errors[2]
    assert "cannot connect to MCP server 'broken'" in errors[2]
    assert host_pids_with(str(script)) == []


def test_a_sandboxed_stdio_server_has_no_network_unless_its_config_says_so(
    tmp_path: Path,
) -> None:
    script = server_script(tmp_path)
    entry = {"command": sys.executable, "args": [str(script)]}
    config = write_config(tmp_path, {"closed": entry, "open": {**entry, "network": True}})
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        model = write_script(
            tmp_path,
            [
                call("mcp__closed__reach", host="127.0.0.1", port=port),
                call("mcp__open__reach", host="127.0.0.1", port=port),
                call("finish", message="done"),
            ],
        )
        url = f"sqlite:///{tmp_path / 'run.db'}"
        done = treadle(
            "run", "go", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(model),
            "--mcp-config", str(config), "--store", url,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _info, events = stored_events(url)
    results = [e.content for e in events if e.kind == "observation"]
    assert results[0].startswith("unreachable")  # its own loopback: the host's is not there
    assert results[1] == "reached"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"mcpServers": {\n  "x": }', "invalid JSON at line 2 column 8"),
        ('{"servers": {}}', 'expected an object with the key "mcpServers"'),
        (
            '{"mcpServers": {"x": {"command": "a", "url": "http://h"}}}',
            "mcpServers.x: give exactly one of command",
        ),
        ('{"mcpServers": {"x": {"command": "a", "port": 3}}}', "mcpServers.x.port: Extra inputs"),
        (
            '{"mcpServers": {"x": {"url": "http://h", "headers": {"A": "${NOT_SET_HERE}"}}}}',
            "not set in this environment: x: ${NOT_SET_HERE}",
        ),
    ],
)
def test_a_bad_config_file_exits_2_naming_the_file_and_the_problem(
    tmp_path: Path, content: str, expected: str
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(content)
    url = f"sqlite:///{tmp_path / 'run.db'}"
    done = treadle(
        "run", "go", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(config),
        "--mcp-config", str(config), "--store", url,
    )  # fmt: skip
    assert done.returncode == 2
    assert str(config) in done.stderr
    assert expected in done.stderr
    assert not (tmp_path / "run.db").exists() or stored_conversations(url) == 0


def stored_conversations(url: str) -> int:
    store = open_store(url)
    try:
        return len(store.list_conversations())
    finally:
        store.close()


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    done = treadle(
        "run", "go", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(tmp_path / "s.json"),
        "--mcp-config", str(tmp_path / "nope.json"),
    )  # fmt: skip
    assert done.returncode == 2
    assert f"cannot read MCP config {tmp_path / 'nope.json'}: No such file" in done.stderr
