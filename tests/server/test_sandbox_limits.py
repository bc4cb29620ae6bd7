"""The server's --sandbox/--network/--mount-ro are limits, not defaults: a client asking for less
isolation gets 403 with a message, and a conversation's tools really run sandboxed on a real
server (they cannot read the server's command line); the isolation is in the API's view."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from treadle.client import RemoteError, TreadleClient
from treadle.data.settings import SandboxSettings
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.workspace import check_bubblewrap

try:
    check_bubblewrap()
except Exception as problem:  # CI installs bubblewrap (make test)
    pytest.skip(f"bubblewrap cannot run here: {problem}", allow_module_level=True)

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def terminal(command: str) -> dict:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


@pytest.mark.parametrize(
    ("sandbox", "named"),
    [
        ({"kind": "none"}, "sandbox none"),
        ({"network": "on"}, "network on"),
        ({"mounts_ro": ["/opt"]}, "mounts /opt"),
        ({"limits": {"processes": None}}, "limits.processes"),
        ({"limits": {"memory_mib": 1_000_000}}, "limits.memory_mib"),
    ],
)
def test_a_client_cannot_loosen_the_servers_sandbox(client, settings_for, sandbox, named):
    settings = settings_for([FINISH]).model_copy(
        update={"sandbox": SandboxSettings.model_validate(sandbox)}
    )
    with pytest.raises(RemoteError) as refused:
        client.create_conversation(settings)
    assert refused.value.status == 403
    assert refused.value.code == "sandbox_refused"
    assert named in refused.value.message
    assert client.list_conversations().items == []  # nothing was made


def test_tools_run_sandboxed_on_the_server_and_the_view_says_so(server, client, settings_for):
    server_pid = server.process.pid
    read = terminal(f"tr '\\0' ' ' < /proc/{server_pid}/cmdline; ls /proc | grep -c '^[0-9]'")
    stricter = SandboxSettings(limits={"memory_mib": 1024})  # stricter than the limit: kept
    conversation = client.create_conversation(
        settings_for([read, FINISH]).model_copy(update={"sandbox": stricter})
    )
    assert conversation.info().isolation is None  # no run yet
    conversation.send_message("go")
    assert conversation.run() is Status.FINISHED
    output = next(e for e in conversation.active_path() if e.kind == "observation").content
    assert "No such file or directory" in output
    assert "treadle serve" not in output
    isolation = conversation.info().isolation
    assert isolation is not None
    assert (isolation.sandbox, isolation.network) == ("bubblewrap", "off")
    assert isolation.limits["memory_mib"] == 1024
    assert "bubblewrap, network off" in isolation.text


def test_a_server_that_allows_no_sandbox_runs_one_when_asked_for_none(tmp_path: Path):
    store_url = f"sqlite:///{tmp_path / 'server.db'}"
    server = ServerProcess(
        store_url, log_dir=tmp_path, extra_args=["--sandbox", "none", "--network", "on"]
    ).start()
    try:
        with TreadleClient(server.base_url) as client:
            read = terminal(f"tr '\\0' ' ' < /proc/{server.process.pid}/cmdline")
            settings = ConversationSettings.scripted_inline(
                [read, FINISH], tmp_path / "ws", sandbox=SandboxSettings(kind="none")
            )
            conversation = client.create_conversation(settings)
            conversation.send_message("go")
            assert conversation.run() is Status.FINISHED
            output = next(e for e in conversation.active_path() if e.kind == "observation").content
            isolation = conversation.info().isolation
    finally:
        server.stop()
    assert "treadle serve" in output  # unsandboxed, the tools see the server: the record says so
    assert isolation is not None
    assert isolation.sandbox == "none"
    assert isolation.unsandboxed_runs == 1
    assert_store_audits_clean(store_url)


def test_a_servers_allow_list_bounds_its_clients_lists(tmp_path: Path):
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "17")
            self.end_headers()
            self.wfile.write(b"allowed and read\n")

        def log_message(self, *args: object) -> None:
            pass

    local = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    served = threading.Thread(target=local.serve_forever, daemon=True)
    served.start()
    port = local.server_address[1]
    limit = f"allow=*.example.com,127.0.0.1:{port}"
    store_url = f"sqlite:///{tmp_path / 'server.db'}"
    server = ServerProcess(store_url, log_dir=tmp_path, extra_args=["--network", limit]).start()
    workspace = tmp_path / "ws"
    try:
        with TreadleClient(server.base_url) as client:
            for wider, named in [
                (f"allow=127.0.0.1:{port},evil.org", "evil.org"),
                ("allow=*.com.example.com,example.com", "example.com (not within"),
                ("on", "network on"),
            ]:
                settings = ConversationSettings.scripted_inline(
                    [FINISH], workspace, sandbox=SandboxSettings(network=wider)
                )
                with pytest.raises(RemoteError) as refused:
                    client.create_conversation(settings)
                assert (refused.value.status, refused.value.code) == (403, "sandbox_refused")
                assert named in refused.value.message
                assert limit in refused.value.message
            mcp = ConversationSettings.scripted_inline(
                [FINISH],
                workspace,
                sandbox=SandboxSettings(network=f"allow=127.0.0.1:{port}"),
                mcp_servers={"web": {"command": "/bin/true", "network": "allow=evil.org"}},
            )
            with pytest.raises(RemoteError) as refused:
                client.create_conversation(mcp)
            assert refused.value.status == 403
            assert "evil.org" in refused.value.message

            fetch = terminal(f"curl -sS http://127.0.0.1:{port}/")
            within = ConversationSettings.scripted_inline(
                [fetch, FINISH],
                workspace,
                sandbox=SandboxSettings(network=f"allow=127.0.0.1:{port}"),
            )
            conversation = client.create_conversation(within)
            conversation.send_message("go")
            assert conversation.run() is Status.FINISHED
            output = next(e for e in conversation.active_path() if e.kind == "observation").content
            isolation = conversation.info().isolation
    finally:
        server.stop()
        local.shutdown()
        local.server_close()
    assert "allowed and read" in output
    assert isolation is not None
    assert isolation.network == f"allow=127.0.0.1:{port}"
    assert f"network allow=127.0.0.1:{port}" in isolation.text
    assert_store_audits_clean(store_url)
