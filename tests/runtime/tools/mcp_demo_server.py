"""A small real MCP server (the SDK's MCPServer, formerly FastMCP) for the MCP tool tests.

Run as ``python mcp_demo_server.py`` (stdio) or ``python mcp_demo_server.py http PORT``.
"""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, ToolAnnotations

server = MCPServer("treadle-demo", log_level="ERROR")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str, times: int = 1) -> str:
    """Upper-case a text, repeated."""
    return " ".join([text.upper()] * times)


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool(name="pixel.png")
def pixel() -> ImageContent:
    """A one-pixel image (a name that is not a valid function name, on purpose)."""
    return ImageContent(data="iVBORw0KGgo=", mime_type="image/png")


@server.tool()
def wait(seconds: float) -> str:
    """Answer after ``seconds`` (a slow call, to interrupt)."""
    import time

    time.sleep(seconds)
    return f"waited {seconds} s"


@server.tool()
def env_value(name: str) -> str:
    """The value of an environment variable of the server process."""
    import os

    return os.environ.get(name, "<unset>")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
