"""MCP servers owned by a conversation: started when it is opened, stopped when it is closed or
when opening it fails; ``${VAR}`` resolved from the policy's environment and registered masked."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from support.processes import host_pids_with
from treadle.data.mcp import MCPServerConfig
from treadle.runtime.conversation import Conversation
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import ConversationSettings, HostProvides, SettingsPolicy
from treadle.runtime.tools import ToolCallError
from treadle.runtime.tools.mcp_config import MCPConfigError, resolve
from treadle.store.base import ConversationExists

SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    copy = tmp_path / "own-mcp-server" / "server.py"
    copy.parent.mkdir()
    shutil.copy(SERVER, copy)
    return copy


def settings_with(script: Path, workspace: Path) -> ConversationSettings:
    server = {"command": sys.executable, "args": [str(script)], "env": {"K": "${MCP_TEST_KEY}"}}
    return ConversationSettings.scripted_inline(
        [{"text": "hello"}],
        workspace,
        mcp_servers={"demo": server},
        sandbox={"kind": "none"},
    )


POLICY = SettingsPolicy(provides=HostProvides(mcp_environment={"MCP_TEST_KEY": "value-of-the-key"}))


def test_the_servers_live_as_long_as_the_conversation_object(store, workspace, script) -> None:
    assert host_pids_with(str(script)) == []
    with Conversation.create(store, settings_with(script, workspace), policy=POLICY) as conv:
        assert "mcp__demo__echo" in conv.agent.tools
        assert host_pids_with(str(script)) != []
        assert "MCP_TEST_KEY" in conv.secrets
        assert conv.secrets.env() == {}  # masked, never given to the terminal
    assert host_pids_with(str(script)) == []
    with Conversation.open(store, conv.id, policy=POLICY) as again:  # reconnected
        assert "mcp__demo__echo" in again.agent.tools
    assert host_pids_with(str(script)) == []


def test_opening_that_fails_stops_the_servers_it_started(store, workspace, script) -> None:
    settings = settings_with(script, workspace)
    Conversation.create(store, settings, id="taken", policy=POLICY).close()
    with pytest.raises(ConversationExists):
        Conversation.create(store, settings, id="taken", policy=POLICY)
    assert host_pids_with(str(script)) == []


def test_without_the_variable_the_server_is_left_out_and_named(store, workspace, script) -> None:
    with Conversation.create(store, settings_with(script, workspace)) as conv:
        assert not any(name.startswith("mcp__") for name in conv.agent.tools)
        assert host_pids_with(str(script)) == []
        with pytest.raises(ToolCallError) as caught:
            conv.agent.tools.tool("mcp__demo__echo")
    assert "The MCP server 'demo' did not start" in str(caught.value)
    assert "${MCP_TEST_KEY} not set in the environment" in str(caught.value)


def test_references_are_replaced_and_their_values_registered() -> None:
    config = MCPServerConfig(
        url="https://${HOST_NAME}/mcp", headers={"Authorization": "Bearer ${TOKEN}"}
    )
    secrets = Secrets()
    resolved = resolve("web", config, {"HOST_NAME": "mcp.example", "TOKEN": "t0k3n-value"}, secrets)
    assert resolved.url == "https://mcp.example/mcp"
    assert resolved.headers == {"Authorization": "Bearer t0k3n-value"}
    assert secrets.mask("sent Bearer t0k3n-value") == "sent Bearer <secret:TOKEN>"
    with pytest.raises(MCPConfigError, match=r"'web' cannot start: \$\{TOKEN\} not set"):
        resolve("web", config, {"HOST_NAME": "mcp.example"}, Secrets())
