"""Which MCP servers a conversation gets in the process that runs it: its own (stored in its
settings) and the process's (``treadle serve --mcp-config``), checked against the process's policy.

Trusted settings (``treadle run``) resolve ``${VAR}`` from the process's environment and run their
stdio servers sandboxed when the conversation is. A server's clients are not trusted: their
servers always run sandboxed, may reference no variable of the server's environment, and get
the network only when the server's own limit allows it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treadle.data.mcp import MCP_SERVERS_KEY, mcp_tool_prefix
from treadle.data.network import network_looser
from treadle.events.frozen_json import thaw
from treadle.events.model import StateChangeEvent
from treadle.store.base import EventQuery, EventStore

if TYPE_CHECKING:
    from treadle.data.settings import ConversationSettings, SandboxSettings
    from treadle.runtime.secrets import Secrets
    from treadle.runtime.settings import SettingsPolicy
    from treadle.runtime.tools.mcp import MCPTool


@dataclass
class MCPTools:
    """What connecting gave: the live tools, and why each server that did not start failed."""

    tools: list[MCPTool]
    unavailable: dict[str, str]
    servers: list[dict[str, Any]] = field(default_factory=list)
    """Each server as the ``mcp_servers`` fact records it (``server_fact``), in launch order."""


def check_mcp_servers(settings: ConversationSettings, policy: SettingsPolicy) -> None:
    """Refuse what a client's servers ask beyond the policy: ``SettingsError`` for a
    ``${VAR}`` reference or a name the process's own servers use, ``SandboxRefused`` for
    a network beyond the sandbox limit's (on, or hosts outside its allow list)."""
    from treadle.runtime.settings import SandboxRefused, SettingsError

    taken = sorted(set(settings.mcp_servers) & set(policy.provides.mcp_servers))
    if taken:
        raise SettingsError(
            f"MCP server name(s) {', '.join(map(repr, taken))} are this server's own "
            "(--mcp-config): name yours otherwise"
        )
    if policy.allows.trusted:
        return
    for name, config in settings.mcp_servers.items():
        references = config.references()
        if references:
            raise SettingsError(
                f"MCP server {name!r} references {', '.join('${' + v + '}' for v in references)}"
                ": a client's MCP servers cannot read this server's environment; send the values"
            )
        limit = policy.allows.sandbox_limit
        looser = network_looser(config.network_choice, limit.network) if limit else None
        if looser is not None:
            raise SandboxRefused(
                f'this server does not allow MCP server {name!r} "network": '
                f"{json.dumps(config.network)}: {looser}"
            )


def connect_mcp_servers(
    settings: ConversationSettings,
    policy: SettingsPolicy,
    sandbox: SandboxSettings,
    workspace: Path,
    secrets: Secrets,
) -> MCPTools:
    """Start (or reach) every server the conversation gets here; those that fail are kept
    with their reason. ``sandbox``: what the conversation's tools run under in this run."""
    check_mcp_servers(settings, policy)
    if not policy.provides.mcp_servers and not settings.mcp_servers:
        return MCPTools([], {})  # without loading the MCP client (0.7 s of imports)
    # Here, not at the top: only a conversation with servers loads mcp.
    from treadle.runtime.tools.mcp_config import MCPLaunch, connect_servers
    from treadle.runtime.workspace.sandbox_user import sandbox_user

    environ: Mapping[str, str] = policy.provides.mcp_environment or {}
    sandboxed = sandbox.kind == "bubblewrap"
    launches = [
        MCPLaunch(name, config, sandboxed, environ)
        for name, config in policy.provides.mcp_servers.items()
    ]
    for name, config in settings.mcp_servers.items():
        if policy.allows.trusted:
            launches.append(MCPLaunch(name, config, sandboxed, environ))
        else:  # a client's: always sandboxed, nothing of the host but the executable
            launches.append(MCPLaunch(name, config, True, {}, extra_mounts=False))
    if not launches:
        return MCPTools([], {})
    return connect_servers(
        launches,
        secrets=secrets,
        workspace=workspace,
        mounts_ro=sandbox.mounts_ro if sandboxed else (),
        limits=sandbox.limits,
        user=sandbox_user(workspace, policy.provides.sandbox_user),
    )


def read_mcp_servers(store: EventStore, conversation_id: str) -> Any:
    """The newest run's ``mcp_servers`` fact (None: no run recorded one)."""
    query = EventQuery(
        kinds=["state_change"], text=f'"key":"{MCP_SERVERS_KEY}"', order="desc", limit=1
    )
    for stored in store.search(conversation_id, query).items:
        if isinstance(stored.event, StateChangeEvent) and stored.event.key == MCP_SERVERS_KEY:
            return thaw(stored.event.value)
    return None


def unavailable_prefixes(connected: MCPTools) -> dict[str, str]:
    """Tool-name prefix -> the error a call to a tool of a server that did not start gets."""
    return {
        mcp_tool_prefix(name): (
            f"The MCP server {name!r} did not start, so its tools are unavailable: {reason}. "
            "The other tools work; it is started again when the conversation is reopened."
        )
        for name, reason in connected.unavailable.items()
    }
