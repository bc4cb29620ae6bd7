"""A small stdio MCP server (the SDK's MCPServer, formerly FastMCP) for the tests that drive MCP
through ``treadle run --mcp-config`` and the agent server: run as ``python mcp_server.py``."""

import os
import signal
import socket

from mcp.server.mcpserver import MCPServer

server = MCPServer("treadle-test", log_level="ERROR")


@server.tool()
def echo(text: str) -> str:
    """Say the text back, marked as coming from this server."""
    return f"echo from MCP: {text}"


@server.tool()
def env_value(name: str) -> str:
    """The value of an environment variable of this server's process."""
    return os.environ.get(name, "<unset>")


@server.tool()
def reach(host: str, port: int) -> str:
    """Try a TCP connection from this server's process: whether it has the network."""
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as error:
        return f"unreachable: {error}"
    return "reached"


@server.tool()
def crash() -> str:
    """Kill this server's process outright (SIGKILL), in the middle of the call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "never"


if __name__ == "__main__":
    server.run("stdio")
