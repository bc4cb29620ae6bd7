"""A sandboxed MCP server runs under the sandboxed terminal's resource limits (settings
``sandbox.limits``): memory, file size and CPU time per process, and the number of processes
in a pids cgroup of its own, removed with every process when the conversation closes."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from support.processes import host_pids_with, record_cgroups
from support.replays import FINISH, call, calls, recorded
from treadle.events.model import ObservationEvent
from treadle.runtime.workspace.sandbox import processes_limit

SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")


@pytest.mark.skipif(processes_limit(16) is None, reason="needs a pids cgroup (root, cgroup v1)")
def test_a_sandboxed_server_that_forks_many_processes_is_bounded(
    store, workspace, tmp_path, monkeypatch
) -> None:
    script = tmp_path / "limited-mcp-server" / "server.py"
    script.parent.mkdir()
    shutil.copy(SERVER, script)
    made = record_cgroups(monkeypatch)
    limits = {"processes": 16, "memory_mib": 2048, "file_size_mib": 3, "cpu_seconds": 300}
    responses = [
        calls(call("mcp__demo__fork_many", {"count": 100})),
        calls(call("mcp__demo__rlimit", {"name": "RLIMIT_AS"})),
        calls(call("mcp__demo__rlimit", {"name": "RLIMIT_FSIZE"})),
        calls(call("mcp__demo__rlimit", {"name": "RLIMIT_CPU"})),
        FINISH,
    ]
    conversation = recorded(
        store,
        workspace,
        responses,
        mcp_servers={"demo": {"command": sys.executable, "args": [str(script)]}},
        sandbox={"kind": "bubblewrap", "limits": limits},
    )
    path = store.path_to_root(conversation, store.head(conversation))
    forks, memory, file_size, cpu = [
        e.content for e in path if isinstance(e, ObservationEvent) and e.tool_name != "finish"
    ]
    started = int(forks.split()[1].rstrip(";"))
    assert "refused: Resource temporarily unavailable" in forks
    assert 0 < started < 16  # bwrap, its init and the server count too
    assert memory == str(2048 * 1024 * 1024)
    assert file_size == str(3 * 1024 * 1024)
    assert cpu == "300"
    # Closed: the server, its children and its cgroup are gone.
    assert host_pids_with(str(script)) == []
    assert made, "the sandboxed server got no pids cgroup"
    assert [path for path in made if path.exists()] == []
