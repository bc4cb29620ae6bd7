"""A real stdio MCP server whose tools probe the sandbox it runs in (test_sandbox_kernel.py)."""

import contextlib
import os
import subprocess

from mcp.server.mcpserver import MCPServer

server = MCPServer("kernel-probe", log_level="ERROR")


@server.tool()
def run(command: str) -> str:
    """``command`` by /bin/sh -c: its exit code, stdout and stderr (its stdin: none)."""
    done = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


@server.tool()
def descriptors() -> str:
    """This server's open descriptors and where each leads, one per line."""
    lines = []
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        with contextlib.suppress(OSError):
            lines.append(f"{name} {os.readlink(f'/proc/self/fd/{name}')}")
    return "\n".join(lines)


@server.tool()
def to_stderr(text: str) -> str:
    """Write ``text`` (and a newline) to this server's own stderr."""
    os.write(2, text.encode() + b"\n")
    return "written"


@server.tool()
def read_own_stderr() -> str:
    """What reopening this server's stderr (``/proc/self/fd/2``) for reading gives."""
    try:
        fd = os.open("/proc/self/fd/2", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        return f"refused: {error.strerror}"
    try:
        return "read: " + os.read(fd, 65536).decode("utf-8", "replace")
    except OSError as error:
        return f"nothing: {error.strerror}"
    finally:
        os.close(fd)


if __name__ == "__main__":
    server.run("stdio")
