"""A small stdio MCP server (the SDK's MCPServer, formerly FastMCP) for the tests that drive MCP
through ``treadle run --mcp-config`` and the agent server: run as ``python mcp_server.py``."""

import os
import resource
import signal
import socket
import time

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
def fetch(url: str) -> str:
    """GET a URL with Python's urllib (which honours the proxy variables): body or error."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}: {error.read().decode('utf-8', 'replace')}"
    except OSError as error:
        return f"failed: {error}"


@server.tool()
def fork_many(count: int) -> str:
    """Start ``count`` sleeping child processes: how many started, and the first refusal."""
    started = 0
    for _ in range(count):
        try:
            pid = os.fork()
        except OSError as error:
            return f"started {started}; refused: {error.strerror}"
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        started += 1
    return f"started {started}"


@server.tool()
def rlimit(name: str) -> str:
    """This process's soft limit ``name`` (e.g. RLIMIT_AS), or "unlimited"."""
    soft, _hard = resource.getrlimit(getattr(resource, name))
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


@server.tool()
def crash() -> str:
    """Kill this server's process outright (SIGKILL), in the middle of the call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "never"


if __name__ == "__main__":
    server.run("stdio")
