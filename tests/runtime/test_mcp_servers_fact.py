"""The ``mcp_servers`` fact: at the start of each run, which MCP servers the conversation
connected or failed to, with their transport and sandboxing, the failure's masked reason and the
tools each gave; never a secret. ``treadle log`` says it in words."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from support.cli import run_treadle
from treadle.data.mcp import MCP_SERVERS_KEY
from treadle.events.frozen_json import thaw
from treadle.events.model import StateChangeEvent
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings, HostProvides, SettingsPolicy

SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"
SECRET = "s3cret-for-mcp-fact-4711"
TOOLS = ["echo", "env_value", "reach", "fetch", "fork_many", "rlimit", "crash"]

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")


def test_each_run_records_the_servers_that_connected_or_failed_without_secrets(
    store, store_file, workspace, tmp_path
) -> None:
    script = tmp_path / "fact-mcp-server" / "server.py"
    script.parent.mkdir()
    shutil.copy(SERVER, script)
    servers = {
        "demo": {"command": sys.executable, "args": [str(script)], "env": {"K": "${FACT_KEY}"}},
        "web": {
            "url": "http://127.0.0.1:9/mcp",  # the discard port: nothing answers there
            "headers": {"Authorization": "Bearer ${FACT_KEY}"},
            "timeout": 5,
        },
        "missing": {"command": str(tmp_path / "no-such-server"), "args": ["--key", "${FACT_KEY}"]},
    }
    settings = ConversationSettings.scripted_inline(
        [{"text": "one"}, {"text": "two"}],
        workspace,
        mcp_servers=servers,
        sandbox={"kind": "bubblewrap"},
    )
    policy = SettingsPolicy(provides=HostProvides(mcp_environment={"FACT_KEY": SECRET}))
    with Conversation.create(store, settings, policy=policy) as conversation:
        for text in ("first", "second"):
            conversation.send_message(text)
            conversation.run()
    stored = [item.event for item in store.get_range(conversation.id, 0, 10**9)]
    facts = [
        thaw(e.value)
        for e in stored
        if isinstance(e, StateChangeEvent) and e.key == MCP_SERVERS_KEY
    ]
    assert len(facts) == 2  # one per run
    assert facts[0] == facts[1]
    demo, web, missing = facts[0]["servers"]
    assert demo == {
        "name": "demo",
        "transport": "stdio",
        "sandbox": "bubblewrap",
        "network": "off",
        "status": "connected",
        "error": None,
        "tools": [f"mcp__demo__{tool}" for tool in TOOLS],
    }
    assert (web["transport"], web["sandbox"], web["network"], web["status"]) == (
        "http",
        None,
        None,
        "failed",
    )
    assert "cannot connect to MCP server 'web'" in web["error"]
    assert (missing["status"], missing["tools"]) == ("failed", [])
    assert "not found or not executable" in missing["error"]
    assert SECRET not in json.dumps([event.model_dump(mode="json") for event in stored])

    shown = run_treadle("log", conversation.id, "--store", f"sqlite:///{store_file}", columns=400)
    assert shown.returncode == 0, shown.stderr
    assert (
        f"MCP servers: demo (stdio, bubblewrap, network off): connected, {len(TOOLS)} tool(s); web (http): "
        "failed: cannot connect to MCP server 'web'" in " ".join(shown.stdout.split())
    )
