"""``--mcp-config FILE`` of ``treadle run`` and ``treadle serve``: the servers of an ``mcpServers``
JSON file, or exit 2 naming the file and what is wrong (JSON position, key, unset variable)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from treadle.cli.output import EXIT_BAD_INPUT, fail

if TYPE_CHECKING:
    from treadle.data.mcp import MCPServerConfig


def mcp_servers_option(path: Path | None) -> dict[str, MCPServerConfig]:
    """The servers ``path`` holds (none without it). Every ``${VAR}`` they name must be set
    here: this process resolves them when it starts the servers."""
    if path is None:
        return {}
    # Here, not at the top: it loads the MCP client, which only a run with servers needs.
    from treadle.runtime.tools.mcp_config import MCPConfigError, load_mcp_config, missing_variables

    try:
        servers = load_mcp_config(path)
    except MCPConfigError as error:
        fail(f"--mcp-config: {error}", EXIT_BAD_INPUT)
    missing = missing_variables(servers, os.environ)
    if missing:
        fail(
            f"--mcp-config: MCP config {path}: not set in this environment: {', '.join(missing)}"
            " (values are read from the environment of the process that runs the conversation)",
            EXIT_BAD_INPUT,
        )
    return servers
