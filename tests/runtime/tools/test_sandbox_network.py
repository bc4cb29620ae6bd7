"""Network by name (``network: allow=HOST[:PORT],…``): real bubblewrap, the real terminal tool,
a proxy bound inside the sandbox's own network namespace.

Two HTTP servers on this machine's 127.0.0.1 (one allowed, one not) and PostgreSQL on 5432 (not
allowed): the allowed one is reached with curl and Python's urllib through the proxy, the others
get the proxy's refusal naming the host and the list, and a program that ignores the proxy finds
no way out. Hostile requests (huge heads, endless bodies, odd hosts) get clean refusals; the
proxy's threads and descriptors are gone when the sandbox closes.
"""

from __future__ import annotations

import http.server
import os
import socket
import textwrap
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.waiting import wait_until
from treadle.data.network import AllowList
from treadle.environment import shell_environment
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import (
    ConversationSettings,
    HostProvides,
    SandboxSettings,
    SettingsPolicy,
    build_workspace,
)
from treadle.runtime.tools import ToolContext, ToolResult, ToolSet, builtin_tools
from treadle.runtime.workspace import LocalWorkspace, SandboxUnavailable, check_bubblewrap
from treadle.runtime.workspace.network_proxy import ProxyLimits, ProxyServer, SandboxNetwork

try:
    check_bubblewrap()
except Exception as problem:  # CI installs bubblewrap (make test): this is for a dev machine
    pytest.skip(f"bubblewrap cannot run here: {problem}", allow_module_level=True)

if os.geteuid() != 0:
    pytest.skip("network allow= binds its proxy with setns: root only", allow_module_level=True)


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.body  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _http_server(body: bytes) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.body = body  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def allowed_port() -> Iterator[int]:
    yield from _http_server(b"hello from the allowed server\n")


@pytest.fixture
def other_port() -> Iterator[int]:
    yield from _http_server(b"the other server must not be reached\n")


@pytest.fixture
def tools() -> Iterator[ToolSet]:
    tool_set = builtin_tools(["terminal"])
    yield tool_set
    tool_set.close()


def workspace_for(tmp_path: Path, network: str) -> LocalWorkspace:
    settings = ConversationSettings.scripted_inline([], tmp_path / "ws")
    chosen = SandboxSettings(network=network)
    policy = SettingsPolicy(provides=HostProvides(shell_environment=shell_environment()))
    return build_workspace(settings.model_copy(update={"sandbox": chosen}), policy)


def shell(tools: ToolSet, workspace: LocalWorkspace, command: str) -> ToolResult:
    context = ToolContext(workspace=workspace, secrets=Secrets(), conversation_id="network")
    return tools.call("terminal", {"command": command, "timeout": 60}, context)


def python_in(tools: ToolSet, workspace: LocalWorkspace, script: str) -> str:
    """Run a Python script in the sandbox (written to the workspace) and return its output."""
    name = f"probe_{uuid.uuid4().hex[:8]}.py"
    (workspace.root / name).write_text(textwrap.dedent(script))
    return shell(tools, workspace, f"python3 {name}").content


def test_the_allowed_server_is_reached_and_the_others_are_refused(
    tools, tmp_path, allowed_port, other_port
):
    network = f"allow=127.0.0.1:{allowed_port}"
    workspace = workspace_for(tmp_path, network)
    assert workspace.isolation["network"] == network  # the fact records the list
    env = shell(tools, workspace, "env | grep -i _proxy= | sort").content
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        assert f"{name}=http://127.0.0.1:3128" in env

    curl = shell(tools, workspace, f"curl -sS http://127.0.0.1:{allowed_port}/")
    assert curl.content.splitlines()[0] == "hello from the allowed server", curl.content
    urllib_read = python_in(
        tools,
        workspace,
        f"""
        import urllib.request
        print(urllib.request.urlopen("http://127.0.0.1:{allowed_port}/", timeout=30).read().decode())
        """,
    )
    assert "hello from the allowed server" in urllib_read

    refused = shell(
        tools, workspace, f"curl -sS -w '%{{http_code}}' http://127.0.0.1:{other_port}/"
    ).content
    assert f"treadle: 127.0.0.1:{other_port} is not allowed (network {network})" in refused
    assert refused.splitlines()[1] == "403"
    assert "must not be reached" not in refused


def test_postgresql_on_5432_is_refused_by_connect_and_unreachable_directly(tools, tmp_path):
    workspace = workspace_for(tmp_path, "allow=127.0.0.1:9")
    tunnel = python_in(
        tools,
        workspace,
        """
        import http.client
        connection = http.client.HTTPConnection("127.0.0.1", 3128, timeout=30)
        connection.set_tunnel("127.0.0.1", 5432)
        try:
            connection.connect()
        except OSError as error:
            print("refused:", error)
        """,
    )
    assert "refused: Tunnel connection failed: 403" in tunnel
    assert "127.0.0.1:5432 is not allowed (network allow=127.0.0.1:9)" in tunnel

    # Ignoring the proxy: this sandbox's 127.0.0.1 is its own (nothing listens on 5432 there)
    # and every other address has no route.
    direct = python_in(
        tools,
        workspace,
        """
        import socket
        for address in [("127.0.0.1", 5432), ("192.0.2.1", 443)]:
            try:
                socket.create_connection(address, timeout=10).close()
                print(address, "connected")
            except OSError as error:
                print(address, error.strerror)
        """,
    )
    assert "('127.0.0.1', 5432) Connection refused" in direct
    assert "('192.0.2.1', 443) Network is unreachable" in direct
    assert "connected" not in direct


def test_with_the_network_on_postgresql_is_reached_so_the_probe_can_fail(tools, tmp_path):
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 5432)) != 0:
            pytest.skip("no PostgreSQL at 127.0.0.1:5432")
    workspace = workspace_for(tmp_path, "on")
    direct = python_in(
        tools,
        workspace,
        """
        import socket
        socket.create_connection(("127.0.0.1", 5432), timeout=10).close()
        print("connected")
        """,
    )
    assert "connected" in direct


def test_a_name_is_resolved_outside_and_checked(tools, tmp_path, allowed_port):
    # localhost resolves (here, outside) to loopback: allowed only because it is named with
    # its port; the same port under another name is refused.
    workspace = workspace_for(tmp_path, f"allow=localhost:{allowed_port}")
    named = shell(tools, workspace, f"curl -sS http://localhost:{allowed_port}/").content
    assert named.splitlines()[0] == "hello from the allowed server", named
    by_address = shell(tools, workspace, f"curl -sS http://127.0.0.1:{allowed_port}/").content
    assert f"127.0.0.1:{allowed_port} is not allowed" in by_address


HOSTILE = """
import select, socket, sys

def ask(data, *, stream=b"", limit=200000):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    try:
        s.sendall(data)
        sent = 0
        while stream and sent < limit:
            if select.select([s], [], [], 0)[0]:
                break  # answered: stop sending, read it
            try:
                s.sendall(stream)
            except OSError:
                break
            sent += len(stream)
        answer = b""
        while True:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        return answer.split(b"\\r\\n")[0].decode("ascii", "replace")
    finally:
        s.close()

PORT = int(sys.argv[1])
cases = {
    "huge head": b"GET http://127.0.0.1:%d/ HTTP/1.1\\r\\nX: " % PORT + b"a" * 100000 + b"\\r\\n\\r\\n",
    "too many lines": b"GET http://127.0.0.1:%d/ HTTP/1.1\\r\\n" % PORT + b"X: y\\r\\n" * 500 + b"\\r\\n",
    "other port": b"CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n" % (PORT + 1),
    "short ipv4": b"CONNECT 127.1:%d HTTP/1.1\\r\\n\\r\\n" % PORT,
    "hex ipv4": b"CONNECT 0x7f000001:%d HTTP/1.1\\r\\n\\r\\n" % PORT,
    "mapped ipv6": b"CONNECT [::ffff:127.0.0.1]:5432 HTTP/1.1\\r\\n\\r\\n",
    "userinfo": b"GET http://127.0.0.1:%d@evil.example/ HTTP/1.1\\r\\n\\r\\n" % PORT,
    "escape": b"CONNECT 127.0.0.1:%d\\x1b[31m HTTP/1.1\\r\\n\\r\\n" % PORT,
    "port range": b"CONNECT 127.0.0.1:99999 HTTP/1.1\\r\\n\\r\\n",
    "percent": b"CONNECT %%31%%32%%37.0.0.1:%d HTTP/1.1\\r\\n\\r\\n" % PORT,
    "not ascii": "CONNECT b\\u00fccher.example:443 HTTP/1.1\\r\\n\\r\\n".encode(),
    "no port": b"CONNECT 127.0.0.1 HTTP/1.1\\r\\n\\r\\n",
    "https absolute": b"GET https://127.0.0.1:%d/ HTTP/1.1\\r\\n\\r\\n" % PORT,
    "garbage": b"\\x00\\x01\\x02 hello\\r\\n\\r\\n",
    "zone id": b"CONNECT [fe80::1%%25eth0]:%d HTTP/1.1\\r\\n\\r\\n" % PORT,
}
for name, data in cases.items():
    print(name, "->", ask(data))
print("endless head ->", ask(b"GET http://127.0.0.1:%d/ HTTP/1.1\\r\\n" % PORT, stream=b"X: y" * 4096))
body = b"POST http://192.0.2.7/ HTTP/1.1\\r\\nContent-Length: 1000000000000\\r\\n\\r\\n"
print("endless body ->", ask(body, stream=b"z" * 65536, limit=10**8))
print("still serving ->", ask(b"GET http://127.0.0.1:%d/ HTTP/1.1\\r\\n\\r\\n" % PORT))
"""


def test_hostile_requests_are_refused_cleanly(tools, tmp_path, allowed_port):
    network = f"allow=127.0.0.1:{allowed_port}"
    workspace = workspace_for(tmp_path, network)
    (workspace.root / "hostile.py").write_text(HOSTILE)
    output = shell(tools, workspace, f"python3 hostile.py {allowed_port}").content
    answers = dict(line.split(" -> ", 1) for line in output.splitlines() if " -> " in line)
    assert answers["huge head"].startswith("HTTP/1.1 431"), output
    assert answers["too many lines"].startswith("HTTP/1.1 431"), output
    assert answers["endless head"].startswith("HTTP/1.1 431"), output
    other = f"127.0.0.1:{allowed_port + 1} is not allowed (network {network})"
    assert answers["other port"] == f"HTTP/1.1 403 Forbidden: treadle: {other}", output
    assert "127.0.0.1:5432 is not allowed" in answers["mapped ipv6"], output
    assert answers["endless body"].startswith("HTTP/1.1 403"), output
    assert "192.0.2.7:80 is not allowed" in answers["endless body"], output
    for name in (
        "short ipv4",
        "hex ipv4",
        "userinfo",
        "escape",
        "port range",
        "percent",
        "not ascii",
        "no port",
        "https absolute",
        "garbage",
        "zone id",
    ):
        assert answers[name].startswith("HTTP/1.1 400 Bad Request: "), (name, output)
        assert "\x1b" not in answers[name]
    assert "HTTPS goes through CONNECT" in answers["https absolute"]
    assert answers["still serving"] == "HTTP/1.0 200 OK", output


def _proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(("treadle-proxy", "treadle-n"))]


def test_the_proxy_is_freed_with_its_sandbox(tmp_path, allowed_port):
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before_fds, before_threads = fds(), len(_proxy_threads())
    for round_number in range(3):
        tools = builtin_tools(["terminal"])
        workspace = workspace_for(tmp_path / str(round_number), f"allow=127.0.0.1:{allowed_port}")
        # A tunnel held open by a background job: closing must end it too.
        hold = f"(exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT 127.0.0.1:{allowed_port} HTTP/1.1\\r\\n\\r\\n' >&3; sleep 300) &"
        shell(tools, workspace, hold)
        fetched = shell(tools, workspace, f"curl -sS http://127.0.0.1:{allowed_port}/").content
        assert "hello from the allowed server" in fetched
        wait_until(lambda: len(_proxy_threads()) >= 2, what="the proxy serving the tunnel")
        tools.close()
    # At most as many as before: a proxy thread of an earlier test may end meanwhile.
    wait_until(lambda: len(_proxy_threads()) <= before_threads, what="proxy threads ended")
    wait_until(lambda: fds() == before_fds, what="fds back at baseline")
    assert not list(Path("/tmp").glob("treadle-network-*"))


# The proxy on its own, on a listener of this machine: matching by name with a resolver that
# stands for DNS (outside the system), and the bounds that need short limits.


def _serve(
    allow: str, limits: ProxyLimits, resolver=None
) -> tuple[ProxyServer, int, threading.Thread]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    kwargs = {"resolver": resolver} if resolver else {}
    server = ProxyServer(listener, AllowList.parse(allow), limits, **kwargs)
    thread = threading.Thread(target=server.serve)
    thread.start()
    return server, listener.getsockname()[1], thread


def test_wildcards_match_names_below_the_domain_only(allowed_port):
    names = {
        "a.example.test",
        "x.y.example.test",
        "example.test",
        "a.example.other",
        "evil.example.test",
    }

    def resolver(name: str, port: int) -> list[tuple[int, str]]:
        assert name in names
        if name == "evil.example.test":
            return [(socket.AF_INET, "169.254.169.254")]  # a name pointing at the metadata IP
        return [(socket.AF_INET, "127.0.0.1")]

    allow = f"allow=*.example.test:{allowed_port},127.0.0.1:{allowed_port}"
    server, port, thread = _serve(allow, ProxyLimits(), resolver)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"})
    )
    try:
        for name in ("a.example.test", "x.y.example.test"):
            with opener.open(f"http://{name}:{allowed_port}/", timeout=30) as answer:
                assert answer.read() == b"hello from the allowed server\n"
        for name in ("example.test", "a.example.other"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                opener.open(f"http://{name}:{allowed_port}/", timeout=30)
            assert refused.value.code == 403
            assert f"{name}:{allowed_port} is not allowed" in refused.value.read().decode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(f"http://evil.example.test:{allowed_port}/", timeout=30)
        said = refused.value.read().decode()
        assert "resolves to 169.254.169.254, a loopback or link-local address" in said
    finally:
        server.stop()
        thread.join()


def test_a_name_resolving_to_loopback_needs_that_address_named(allowed_port):
    server, port, thread = _serve(
        "allow=api.example.test", ProxyLimits(), lambda name, port: [(socket.AF_INET, "127.0.0.1")]
    )
    try:
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
            answer = client.recv(4096).decode()
        assert answer.startswith("HTTP/1.1 403")
        assert "api.example.test:443 resolves to 127.0.0.1" in answer
    finally:
        server.stop()
        thread.join()


def test_slow_heads_idle_tunnels_and_too_many_connections_are_cut(allowed_port):
    limits = ProxyLimits(max_connections=2, header_timeout_s=0.5, idle_timeout_s=0.5)
    server, port, thread = _serve(f"allow=127.0.0.1:{allowed_port}", limits)
    try:
        slow = socket.create_connection(("127.0.0.1", port), timeout=30)
        slow.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\n")  # and never the rest
        assert slow.recv(4096).startswith(b"HTTP/1.1 408")
        slow.close()
        tunnel = socket.create_connection(("127.0.0.1", port), timeout=30)
        tunnel.sendall(f"CONNECT 127.0.0.1:{allowed_port} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.recv(4096).startswith(b"HTTP/1.1 200")
        # Idle: the proxy closes the tunnel (the client sees the end of the stream).
        assert tunnel.recv(4096) == b""
        tunnel.close()
    finally:
        server.stop()
        thread.join()
    server, port, thread = _serve(f"allow=127.0.0.1:{allowed_port}", ProxyLimits(max_connections=2))
    try:
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
        wait_until(lambda: server.connections == 2, what="two connections served")
        extra = socket.create_connection(("127.0.0.1", port), timeout=30)
        assert extra.recv(4096).startswith(b"HTTP/1.1 503")
        extra.close()
    finally:
        server.stop()  # ends the two held connections too
        thread.join()
    assert server.connections == 0
    assert all(sock.recv(4096) == b"" for sock in held)
    for sock in held:
        sock.close()


def test_a_proxy_whose_sandbox_never_starts_frees_itself():
    before = len(os.listdir("/proc/self/fd"))
    network = SandboxNetwork(AllowList.parse("allow=pypi.org"), setup_timeout_s=0.3)
    folder = Path(network.wrap(["/usr/bin/bwrap"])[4]).parent
    assert folder.is_dir()
    assert network.wait_closed(30)
    assert network.failure == "the sandbox did not start within 0.3 s"
    assert not folder.exists()
    assert len(os.listdir("/proc/self/fd")) == before


def test_closing_a_proxy_before_its_sandbox_starts_frees_it_at_once():
    before = len(os.listdir("/proc/self/fd"))
    network = SandboxNetwork(AllowList.parse("allow=pypi.org"))  # 30 s to start
    network.close()
    assert network.finished
    assert network.failure is None  # closed, not failed
    assert len(os.listdir("/proc/self/fd")) == before


def test_without_root_an_allow_list_is_refused_before_the_sandbox_starts(tmp_path, monkeypatch):
    # The uid is the one thing faked: this machine runs the tests as root.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable, match="needs Treadle to run as root"):
        workspace_for(tmp_path, "allow=pypi.org")
    workspace_for(tmp_path, "off")  # the other choices are not concerned
