"""MCP servers as a conversation's settings name them: the standard ``mcpServers`` entry (stdio:
command, args, env; HTTP: url, headers) and the fixed rule that names their tools.

Data only, validated without the runtime (a client sends it, a store keeps it). Secret values
are written as ``${VAR}`` references, kept as written and resolved only by the process that runs
the conversation (``treadle.runtime.tools.mcp_config``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from treadle.data.network import normalize_network
from treadle.events.fact_keys import MCP_SERVERS_KEY as MCP_SERVERS_KEY

MCPToolNaming = Literal["mcp__server__tool"]
MCP_TOOL_NAMING: Final[MCPToolNaming] = "mcp__server__tool"
"""The one rule naming MCP tools, stored with a conversation's settings when it is created."""

TOOL_NAME_MAX = 64
"""The longest function name providers accept (OpenAI, Anthropic)."""

VARIABLE_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""``${VAR}``: replaced by the variable's value in the environment of the process that runs
the conversation (the same syntax Claude Code and Cursor read)."""


def mcp_servers_text(value: Any) -> str | None:
    """The ``mcp_servers`` fact in one line, e.g. ``MCP servers: files (stdio, bubblewrap,
    network off): connected, 3 tools; web (http): failed: ...``; None for another shape."""
    try:
        parts = []
        for server in value["servers"]:
            how = [str(server["transport"])]
            if server.get("sandbox") is not None:
                how.append(f"{server['sandbox']}, network {server['network']}")
            if server["status"] == "connected":
                said = f"connected, {len(server['tools'])} tool(s)"
            else:
                said = f"failed: {server['error']}"
            parts.append(f"{server['name']} ({', '.join(how)}): {said}")
    except (KeyError, TypeError):
        return None
    return "MCP servers: " + ("; ".join(parts) or "none")


_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NOT_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_-]")
_HASH_CHARACTERS = 8


def mcp_tool_name(server: str, tool: str) -> str:
    """The name the model calls MCP tool ``tool`` of server ``server`` by:
    ``mcp__<server>__<tool>``, as is when it fits ``[A-Za-z0-9_-]{1,64}``; otherwise its other
    characters become ``_``, it is cut to fit and ends with ``_`` and 8 hex digits of the
    SHA-256 of the full name, so two names never meet after fitting. A function of the two
    names alone: adding a server never renames another's tool."""
    wanted = f"mcp__{server}__{tool}"
    if _FUNCTION_NAME.fullmatch(wanted):
        return wanted
    suffix = "_" + hashlib.sha256(wanted.encode("utf-8")).hexdigest()[:_HASH_CHARACTERS]
    fitted = _NOT_NAME_CHARACTER.sub("_", wanted)
    return fitted[: TOOL_NAME_MAX - len(suffix)] + suffix


def mcp_tool_prefix(server: str) -> str:
    """The start every tool name of ``server`` has (to name the server in an error about a
    tool whose server is gone)."""
    return _NOT_NAME_CHARACTER.sub("_", f"mcp__{server}__")[: TOOL_NAME_MAX - _HASH_CHARACTERS - 1]


class MCPServerConfig(BaseModel):
    """One entry of ``mcpServers``: a command started over stdio, or a streamable HTTP URL.
    Any string value may hold ``${VAR}`` references: they are stored as written."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["stdio", "http", "streamable-http"] | None = Field(
        default=None, description="Optional: implied by command (stdio) or url (HTTP)"
    )
    command: str | None = Field(default=None, min_length=1, description="stdio: the executable")
    args: tuple[str, ...] = Field(default=(), description="stdio: its arguments")
    env: dict[str, str] = Field(
        default_factory=dict, description="stdio: variables added to the server's environment"
    )
    cwd: str | None = Field(default=None, description="stdio: its working folder")
    url: str | None = Field(default=None, description="HTTP: the server's endpoint")
    headers: dict[str, str] = Field(
        default_factory=dict, description="HTTP: headers sent with every request"
    )
    network: bool | str = Field(
        default=False,
        description="stdio, sandboxed: true gives the server the host's network; "
        '"allow=HOST[:PORT],..." only those hosts, through a proxy (default: none)',
    )
    timeout: float | None = Field(
        default=None, gt=0, le=86_400, description="Seconds one tool call may take (default 120)"
    )

    @field_validator("network")
    @classmethod
    def _network_choice(cls, network: bool | str) -> bool | str:
        if isinstance(network, bool):
            return network
        normalized = normalize_network(network)  # "on"/"off" mean true/false
        return {"on": True, "off": False}.get(normalized, normalized)

    @property
    def network_choice(self) -> str:
        """The network as a sandbox's settings name it: ``off``, ``on`` or ``allow=…``."""
        if isinstance(self.network, str):
            return self.network
        return "on" if self.network else "off"

    @field_validator("env")
    @classmethod
    def _variable_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"env: {name!r} is not a valid environment variable name")
        return env

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (a stdio server) or url (HTTP)")
        if self.command is not None:
            if self.type not in (None, "stdio"):
                raise ValueError(f"type {self.type} needs a url, not a command")
            if self.headers:
                raise ValueError("headers apply to an HTTP server (url) only")
        else:
            if self.type == "stdio":
                raise ValueError("type stdio needs a command, not a url")
            if self.args or self.env or self.cwd is not None or self.network:
                raise ValueError("args, env, cwd and network apply to a stdio server only")
            url = self.url or ""
            if not VARIABLE_REFERENCE.match(url) and not re.match(r"https?://", url):
                raise ValueError(f"url {url!r} is not an http:// or https:// URL")
        return self

    @property
    def stdio(self) -> bool:
        return self.command is not None

    def references(self) -> list[str]:
        """The variables its values name (``${VAR}``), each once, in order."""
        texts = [self.command or "", *self.args, *self.env.values(), self.cwd or ""]
        texts += [self.url or "", *self.headers.values()]
        names: list[str] = []
        for text in texts:
            for name in VARIABLE_REFERENCE.findall(text):
                if name not in names:
                    names.append(name)
        return names


def check_server_names(servers: dict[str, MCPServerConfig]) -> dict[str, MCPServerConfig]:
    """``servers`` when every name is usable (not empty, no control character, at most 100
    characters); ``ValueError`` naming the first that is not."""
    for name in servers:
        if not name or len(name) > 100 or any(ord(char) < 32 for char in name):
            raise ValueError(
                f"MCP server name {name!r} is not usable: 1 to 100 characters, none a control "
                "character"
            )
    return servers
