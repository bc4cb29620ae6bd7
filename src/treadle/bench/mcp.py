"""``treadle bench mcp``: what an MCP server costs a conversation: starting it (connect and list
its tools; a Python server of the SDK's, plain and in the sandbox) and one tool call's round trip
through the tool boundary (validation, call, masking)."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from treadle.data.mcp import MCPServerConfig
from treadle.runtime.secrets import Secrets
from treadle.runtime.tools import ToolContext, ToolSet
from treadle.runtime.tools.mcp_config import MCPLaunch, connect_servers
from treadle.runtime.workspace.local import LocalWorkspace

SERVER_SOURCE = '''
from mcp.server.mcpserver import MCPServer
server = MCPServer("bench", log_level="ERROR")

@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text

server.run("stdio")
'''


def _start(config: MCPServerConfig, sandboxed: bool, workspace: Path) -> tuple[float, ToolSet]:
    begin = time.perf_counter()
    connected = connect_servers(
        [MCPLaunch("bench", config, sandboxed, {})], secrets=Secrets(), workspace=workspace
    )
    seconds = time.perf_counter() - begin
    if connected.unavailable:
        raise RuntimeError(f"the bench's MCP server did not start: {connected.unavailable}")
    return seconds, ToolSet(connected.tools)


def run_mcp_bench(starts: int = 5, calls: int = 200) -> dict[str, Any]:
    """Medians of ``starts`` starts of each kind (alternating, so a busy machine slows both
    alike) and of ``calls`` calls on one started server."""
    started: dict[str, list[float]] = {"plain": [], "sandbox": []}
    with tempfile.TemporaryDirectory(prefix="treadle-bench-mcp-") as tmp:
        folder = Path(tmp)
        script = folder / "server.py"
        script.write_text(SERVER_SOURCE)
        config = MCPServerConfig(command=sys.executable, args=(str(script),))
        for _ in range(starts):
            for kind in started:
                seconds, tools = _start(config, kind == "sandbox", folder)
                tools.close()
                started[kind].append(seconds)
        _seconds, tools = _start(config, False, folder)
        context = ToolContext(LocalWorkspace(folder), Secrets(), conversation_id="bench")
        round_trips = []
        try:
            for number in range(calls):
                begin = time.perf_counter()
                tools.call("mcp__bench__echo", {"text": f"call {number}"}, context)
                round_trips.append(time.perf_counter() - begin)
        finally:
            tools.close()
    return {
        "starts": starts,
        "calls": calls,
        "mcp_start_s": statistics.median(started["plain"]),
        "sandbox_mcp_start_s": statistics.median(started["sandbox"]),
        "mcp_call_s": statistics.median(round_trips),
    }
