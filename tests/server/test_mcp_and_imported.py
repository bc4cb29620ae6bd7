"""MCP servers on the agent server (the operator's ``--mcp-config``, and a client's, always
sandboxed and within the server's limits), and ``POST /run`` with settings for an imported
conversation that has none."""

from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from support.openhands_folders import CONVERSATIONS
from support.processes import host_pids_with
from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import RemoteError, TreadleClient
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus

SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"
TOKEN = "op-token-9d1e-never-stored"
VENV = str(Path(sys.executable).parent.parent)
INTERPRETER = tuple(dict.fromkeys((VENV, sys.base_prefix)))
"""What the operator shows sandboxes for the test server's interpreter: its virtual environment
and the Python installation that one is made from."""

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")


def call(tool: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def results(client: TreadleClient, conversation_id: str) -> list[str]:
    path = client.conversation(conversation_id).active_path()
    return [e.content if e.kind == "observation" else e.error for e in path
            if e.kind in ("observation", "agent_error")]  # fmt: skip


@pytest.fixture
def script(tmp_path: Path) -> Path:
    """The test MCP server, copied into the workspace (a client's server lies where the
    sandbox shows it) at a path of this test's own, to find its processes by."""
    copy = tmp_path / "workspace" / "mcp-server.py"
    copy.parent.mkdir(exist_ok=True)
    shutil.copy(SERVER, copy)
    return copy


def test_the_operators_servers_reach_every_conversation_and_their_secret_is_masked(
    tmp_path: Path, script: Path
) -> None:
    config = tmp_path / "mcp.json"
    entry = {"command": sys.executable, "args": [str(script)], "env": {"OP_TOKEN": "${OP_TOKEN}"}}
    config.write_text(json.dumps({"mcpServers": {"ops": entry}}))
    store_url = f"sqlite:///{tmp_path / 'server.db'}"
    server = ServerProcess(
        store_url,
        log_dir=tmp_path,
        extra_args=["--mcp-config", str(config), "--idle-timeout", "0"],
        env={"OP_TOKEN": TOKEN},
    ).start()
    try:
        with TreadleClient(server.base_url) as client:
            settings = ConversationSettings.scripted_inline(
                [
                    call("mcp__ops__echo", text="hello"),
                    call("mcp__ops__env_value", name="OP_TOKEN"),
                    call("finish", message="done"),
                ],
                script.parent,
            )
            conversation = client.create_conversation(settings)
            conversation.send_message("go")
            assert conversation.run() is ConversationStatus.FINISHED
            assert results(client, conversation.id) == [
                "echo from MCP: hello",
                "<secret:OP_TOKEN>",
                "done",
            ]
            assert conversation.info().metadata["settings"]["mcp_servers"] == {}
            # Closed with the conversation's object when its run ends (--idle-timeout 0).
            wait_until(lambda: host_pids_with(str(script)) == [], 15, "the MCP server process gone")
    finally:
        server.stop()
    assert TOKEN.encode() not in (tmp_path / "server.db").read_bytes()
    assert_store_audits_clean(store_url)


def test_a_clients_server_runs_sandboxed_within_the_servers_limits(
    tmp_path: Path, script: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'server.db'}"
    mounts = [arg for path in INTERPRETER for arg in ("--mount-ro", path)]
    server = ServerProcess(
        store_url, log_dir=tmp_path, extra_args=[*mounts, "--idle-timeout", "0"]
    ).start()
    entry = {"command": sys.executable, "args": [str(script)]}
    steps = [call("mcp__mine__echo", text="hi"), call("finish", message="done")]
    try:
        with TreadleClient(server.base_url) as client:
            settings = ConversationSettings.scripted_inline(
                steps,
                script.parent,
                mcp_servers={"mine": entry},
                sandbox={"mounts_ro": INTERPRETER},
            )
            conversation = client.create_conversation(settings)
            conversation.send_message("go")
            assert conversation.run() is ConversationStatus.FINISHED
            assert results(client, conversation.id)[0] == "echo from MCP: hi"
            wait_until(lambda: host_pids_with(str(script)) == [], 15, "the MCP server process gone")

            refusals = {
                "network": ({"mine": {**entry, "network": True}}, 403, "sandbox_refused"),
                "variable": (
                    {"mine": {**entry, "env": {"K": "${HOME}"}}},
                    422,
                    "mcp_refused",
                ),
            }
            for servers, status, code in refusals.values():
                refused = ConversationSettings.scripted_inline(
                    steps, script.parent, mcp_servers=servers, sandbox={"mounts_ro": INTERPRETER}
                )
                with pytest.raises(RemoteError) as caught:
                    client.create_conversation(refused)
                assert (caught.value.status, caught.value.code) == (status, code)

            # Without the mount, the interpreter is not in the sandbox: named, the run goes on.
            hidden = ConversationSettings.scripted_inline(
                steps, script.parent, mcp_servers={"mine": entry}
            )
            conversation = client.create_conversation(hidden)
            conversation.send_message("go")
            assert conversation.run() is ConversationStatus.FINISHED
            error = results(client, conversation.id)[0]
            assert "The MCP server 'mine' did not start" in error
            assert "is not inside the sandbox" in error
    finally:
        server.stop()
    assert_store_audits_clean(store_url)


def archive_of(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return buffer.getvalue()


def test_run_with_settings_continues_an_imported_conversation_once(
    server: ServerProcess, client: TreadleClient, tmp_path: Path
) -> None:
    imported = httpx.post(
        f"{server.base_url}/api/conversations/import/openhands",
        content=archive_of(CONVERSATIONS["parallel_calls"]),
    )
    assert imported.status_code == 200, imported.text
    conversation_id = imported.json()["results"][0]["conversation_id"]
    conversation = client.conversation(conversation_id)
    with pytest.raises(RemoteError) as caught:
        conversation.run()
    assert (caught.value.status, caught.value.code) == (409, "not_runnable")

    settings = ConversationSettings.scripted_inline(
        [
            {"text": "(answered in the SDK)"},
            {"text": "(answered in the SDK)"},
            call("terminal", command="echo continued"),
            call("finish", message="done"),
            call("finish", message="done again"),
        ],
        tmp_path / "workspace",
    )
    # A message needs the runtime, so settings come first: the run continues from the head.
    assert conversation.run(settings=settings) is ConversationStatus.FINISHED
    stored = conversation.info().metadata["settings"]
    assert stored["workspace"] == str((tmp_path / "workspace").resolve())
    assert results(client, conversation_id)[-2].startswith("continued")
    conversation.send_message("and then?")  # now it has settings: as any conversation
    assert conversation.run() is ConversationStatus.FINISHED
    assert results(client, conversation_id)[-1] == "done again"

    with pytest.raises(RemoteError) as caught:
        conversation.run(settings=settings)
    assert (caught.value.status, caught.value.code) == (409, "has_settings")
    outside = ConversationSettings.model_validate(
        {**settings.model_dump(mode="json"), "sandbox": {"kind": "none"}}
    )
    other = client.conversation(
        httpx.post(
            f"{server.base_url}/api/conversations/import/openhands",
            content=archive_of(CONVERSATIONS["agent_errors"]),
        ).json()["results"][0]["conversation_id"]
    )
    with pytest.raises(RemoteError) as caught:  # checked as a create's settings are
        other.run(settings=outside)
    assert (caught.value.status, caught.value.code) == (403, "sandbox_refused")
    assert "settings" not in other.info().metadata
