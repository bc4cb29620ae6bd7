"""A sandboxed MCP server whose entry says ``"network": "allow=…"`` gets its own proxy, bound
inside its sandbox: it reaches the listed host and nothing else, the ``mcp_servers`` fact records
the list, and the proxy is gone when the conversation closes."""

from __future__ import annotations

import http.server
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.replays import FINISH, call, calls, recorded
from support.waiting import wait_until
from treadle.data.mcp import MCP_SERVERS_KEY
from treadle.events.frozen_json import thaw
from treadle.events.model import ObservationEvent, StateChangeEvent

SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"

pytestmark = [
    pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap"),
    pytest.mark.skipif(os.geteuid() != 0, reason="network allow= binds its proxy as root"),
]


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "20")
        self.end_headers()
        self.wfile.write(b"from the allowed one")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def allowed_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


def _proxy_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("treadle-proxy"))


def test_an_mcp_server_reaches_only_its_allow_list(store, workspace, tmp_path, allowed_port):
    # Outside the workspace and the system: mounted read-only for the sandboxed server.
    script = tmp_path / "network-mcp-server" / "server.py"
    script.parent.mkdir()
    shutil.copy(SERVER, script)
    network = f"allow=127.0.0.1:{allowed_port}"
    before = _proxy_threads()
    responses = [
        calls(call("mcp__web__fetch", {"url": f"http://127.0.0.1:{allowed_port}/"})),
        calls(call("mcp__web__fetch", {"url": f"http://127.0.0.1:{allowed_port + 1}/"})),
        calls(call("mcp__web__reach", {"host": "192.0.2.1", "port": 443})),
        calls(call("mcp__web__env_value", {"name": "HTTPS_PROXY"})),
        FINISH,
    ]
    entry = {"command": sys.executable, "args": [str(script)], "network": network}
    conversation = recorded(
        store, workspace, responses, mcp_servers={"web": entry}, sandbox={"kind": "bubblewrap"}
    )
    path = store.path_to_root(conversation, store.head(conversation))
    allowed, other, direct, proxy = [
        e.content for e in path if isinstance(e, ObservationEvent) and e.tool_name != "finish"
    ]
    assert allowed == "from the allowed one"
    assert other.startswith("HTTP 403: ")
    assert f"127.0.0.1:{allowed_port + 1} is not allowed (network {network})" in other
    assert "Network is unreachable" in direct
    assert proxy == "http://127.0.0.1:3128"
    stored = [item.event for item in store.get_range(conversation, 0, 10**9)]
    (fact,) = [
        thaw(e.value)
        for e in stored
        if isinstance(e, StateChangeEvent) and e.key == MCP_SERVERS_KEY
    ]
    assert fact["servers"][0]["network"] == network
    wait_until(lambda: _proxy_threads() == before, what="the MCP server's proxy ended")
