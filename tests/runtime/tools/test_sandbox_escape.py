"""The escape suite: attempts to get out of the bubblewrap sandbox through the real terminal tool.

Each attempt fails inside the sandbox and, where that makes sense, works with sandbox ``none``
(so the test would notice a sandbox that quietly stopped isolating). Dangerous attempts (a fork
bomb, a memory hog) run only under the sandbox's limits and inside an outer guard that kills the
sandbox, so a bug can never take the machine down.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.postgres import POSTGRES_BASE_URL
from support.waiting import wait_until
from treadle.environment import shell_environment
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import (
    ConversationSettings,
    HostProvides,
    SandboxSettings,
    SettingsPolicy,
    build_workspace,
)
from treadle.runtime.tools import (
    TerminalTool,
    ToolCallError,
    ToolContext,
    ToolResult,
    ToolSet,
    builtin_tools,
)
from treadle.runtime.workspace import LocalWorkspace, check_bubblewrap
from treadle.store.urls import open_store

try:
    check_bubblewrap()
except Exception as problem:  # CI installs bubblewrap (make test): this is for a dev machine
    pytest.skip(f"bubblewrap cannot run here: {problem}", allow_module_level=True)


def workspace_for(tmp_path: Path, kind: str, **sandbox: object) -> LocalWorkspace:
    settings = ConversationSettings.scripted_inline([], tmp_path / "ws")
    chosen = SandboxSettings(kind=kind, **sandbox)  # type: ignore[arg-type]
    policy = SettingsPolicy(provides=HostProvides(shell_environment=shell_environment()))
    return build_workspace(settings.model_copy(update={"sandbox": chosen}), policy)


@pytest.fixture
def tools() -> Iterator[ToolSet]:
    tool_set = builtin_tools(["terminal", "file_editor"])
    yield tool_set
    tool_set.close()


def shell(
    tools: ToolSet, workspace: LocalWorkspace, command: str, timeout: float = 30
) -> ToolResult:
    context = ToolContext(workspace=workspace, secrets=Secrets(), conversation_id="escape")
    return tools.call("terminal", {"command": command, "timeout": timeout}, context)


def host_processes_with(marker: str) -> list[int]:
    """Pids on this host whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_writing_outside_the_workspace(tools, tmp_path, kind):
    workspace = workspace_for(tmp_path, kind)
    outside = tmp_path / "outside.txt"
    result = shell(tools, workspace, f"echo escaped > {outside}; echo inside > mine.txt")
    assert (workspace.root / "mine.txt").read_text() == "inside\n"  # the workspace is writable
    assert outside.exists() is (kind == "none"), result.content
    system = shell(tools, workspace, "touch /usr/escaped-by-treadle-test")
    if kind == "bubblewrap":
        assert "Read-only file system" in system.content
        assert not Path("/usr/escaped-by-treadle-test").exists()
    else:
        Path("/usr/escaped-by-treadle-test").unlink(missing_ok=True)


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_reading_the_store_file(tools, tmp_path, kind):
    store_file = tmp_path / "store.db"
    store = open_store(f"sqlite:///{store_file}")
    store.create_conversation(title="secret plans")
    store.close()
    workspace = workspace_for(tmp_path, kind)
    result = shell(tools, workspace, f"grep -c 'secret plans' {store_file}")
    assert (result.data["exit_code"] == 0) is (kind == "none"), result.content


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_reading_the_users_home(tools, tmp_path, kind):
    marker = Path.home() / f".treadle-escape-{uuid.uuid4().hex}"
    marker.write_text("private\n")
    try:
        workspace = workspace_for(tmp_path, kind)
        result = shell(tools, workspace, f"cat {marker}")
    finally:
        marker.unlink()
    assert ("private" in result.content) is (kind == "none"), result.content


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_reading_the_servers_environment_and_command_line(tools, tmp_path, kind, monkeypatch):
    monkeypatch.setenv("TREADLE_API_KEY", "sk-server-key-never-for-tools-0123")
    workspace = workspace_for(tmp_path, kind)
    me = os.getpid()
    environ = shell(tools, workspace, f"wc -c < /proc/{me}/environ")
    cmdline = shell(tools, workspace, f"tr '\\0' ' ' < /proc/{me}/cmdline")
    assert (cmdline.data["exit_code"] == 0) is (kind == "none"), cmdline.content
    own = Path(f"/proc/{me}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    assert (own in cmdline.content) is (kind == "none")
    assert (environ.data["exit_code"] == 0) is (kind == "none"), environ.content
    # Never in the shell's own environment, sandboxed or not.
    assert "sk-server-key" not in shell(tools, workspace, "env").content


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_listing_host_processes(tools, tmp_path, kind):
    workspace = workspace_for(tmp_path, kind)
    result = shell(tools, workspace, "ls /proc | grep -E '^[0-9]+$' | sort -n")
    pids = {int(line) for line in result.content.splitlines()[:-1]}
    assert (os.getpid() in pids) is (kind == "none")
    if kind == "bubblewrap":
        assert len(pids) < 10, pids  # bubblewrap's init, bash and the command's own


def postgres_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    ("kind", "network"), [("bubblewrap", "off"), ("bubblewrap", "on"), ("none", "on")]
)
def test_connecting_to_postgresql_on_127_0_0_1(tools, tmp_path, kind, network):
    if not postgres_reachable():
        pytest.skip(f"no PostgreSQL at 127.0.0.1:5432 ({POSTGRES_BASE_URL})")
    workspace = workspace_for(tmp_path, kind, network=network)
    probe = (
        "timeout 5 bash -c 'echo > /dev/tcp/127.0.0.1/5432' 2>/dev/null && echo open || echo closed"
    )
    result = shell(tools, workspace, probe)
    # Network on shares the host's network, its local services included (documented).
    assert result.content.splitlines()[0] == ("open" if network == "on" else "closed")


def test_extra_read_only_mounts(tools, tmp_path):
    toolchain = tmp_path / "toolchain"
    toolchain.mkdir()
    (toolchain / "tool.sh").write_text("echo from the toolchain\n")
    workspace = workspace_for(tmp_path, "bubblewrap", mounts_ro=(str(toolchain),))
    ran = shell(tools, workspace, f"bash {toolchain}/tool.sh; touch {toolchain}/new")
    assert ran.content.splitlines()[0] == "from the toolchain"
    assert "Read-only file system" in ran.content
    assert not (toolchain / "new").exists()
    assert workspace.isolation["mounts_ro"] == [str(toolchain)]


def test_the_process_limit_is_enforced(tools, tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap", limits={"processes": 32})
    if workspace.isolation["limits"]["processes"] is None:
        pytest.skip("no pids cgroup here: the isolation fact says processes are unlimited")
    result = shell(
        tools,
        workspace,
        "for i in $(seq 60); do sleep 30 & done 2>&1 | grep -c 'Resource temporarily'; "
        "kill $(jobs -p) 2>/dev/null; true",
        timeout=60,
    )
    assert int(result.content.splitlines()[0]) > 0, result.content


def guard(tools: ToolSet, seconds: float) -> threading.Timer:
    """The outer guard: closing the tools kills the sandbox (its pid namespace and cgroup)."""
    timer = threading.Timer(seconds, tools.close)
    timer.daemon = True
    timer.start()
    return timer


def test_a_fork_bomb_is_contained_and_the_shell_goes_on(tools, tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap", limits={"processes": 64})
    if workspace.isolation["limits"]["processes"] is None:
        pytest.skip("a fork bomb runs only under a process limit (no pids cgroup here)")
    timer = guard(tools, 120)
    try:
        # The bomb's processes share its process group (no job control in `bash -c`), which
        # the command's timeout kills; the busy loop keeps the command running until then.
        bomb = shell(
            tools,
            workspace,
            "bash -c ':(){ :|:& };:; while :; do :; done' > bomb.log 2>&1",
            timeout=5,
        )
        assert bomb.data["timed_out"] is True
        assert bomb.data["shell_ended"] is False

        def processes_left() -> int:
            result = shell(tools, workspace, "ps -e --no-headers | wc -l")
            return int(result.content.splitlines()[-2])  # fork retries may be said first

        wait_until(lambda: processes_left() < 10, 60, "the bomb's processes gone")
        met = shell(tools, workspace, "grep -c 'Resource temporarily unavailable' bomb.log")
    finally:
        timer.cancel()
    assert int(met.content.splitlines()[0]) > 0  # it met the limit, and the shell goes on


def test_a_memory_hog_is_contained_and_the_shell_goes_on(tools, tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap", limits={"memory_mib": 512})
    timer = guard(tools, 90)
    try:
        hog = shell(tools, workspace, "python3 -c 'x = bytearray(8 * 1024**3)'", timeout=60)
        after = shell(tools, workspace, "echo alive")
    finally:
        timer.cancel()
    assert "MemoryError" in hog.content
    assert after.content.splitlines()[0] == "alive"


def test_a_file_size_limit_stops_a_big_write(tools, tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap", limits={"file_size_mib": 1})
    result = shell(tools, workspace, "head -c 5M /dev/zero > big; echo rc=$?; stat -c %s big")
    assert (workspace.root / "big").stat().st_size == 1024 * 1024
    assert "rc=153" in result.content  # killed by SIGXFSZ (128 + 25)


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_a_timeout_kills_the_commands_children(tools, tmp_path, kind):
    marker = f"100{uuid.uuid4().int % 10**6}.5"
    workspace = workspace_for(tmp_path, kind)
    result = shell(tools, workspace, f"bash -c 'sleep {marker} & sleep {marker}'", timeout=1)
    assert result.data["timed_out"] is True
    wait_until(lambda: not host_processes_with(f"sleep {marker}"), 30, "the children killed")
    assert shell(tools, workspace, "echo still here").content.startswith("still here")


def test_a_background_job_does_not_outlive_the_conversation(tmp_path):
    marker = f"1000.{uuid.uuid4().int % 10**6}"
    workspace = workspace_for(tmp_path, "bubblewrap")
    tools = ToolSet([TerminalTool()])
    try:
        shell(tools, workspace, f"sleep {marker} > /dev/null 2>&1 &")
        assert shell(tools, workspace, "jobs | wc -l").content.startswith("1")
        wait_until(lambda: bool(host_processes_with(f"sleep {marker}")), 30, "the job started")
        (pid,) = host_processes_with(f"sleep {marker}")
        cgroup = pids_cgroup_of(pid)
    finally:
        tools.close()  # what closing the conversation does
    wait_until(lambda: not host_processes_with(f"sleep {marker}"), 30, "the job killed")
    if workspace.isolation["limits"]["processes"] is not None:
        assert cgroup is not None  # the sandbox's own pids cgroup, removed with it
        assert cgroup.name.startswith("treadle-")
        assert not cgroup.exists()


def pids_cgroup_of(pid: int) -> Path | None:
    """The pids cgroup (v1) folder of process ``pid``, when it is in one of its own."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _number, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(",") and path != "/":
            return Path("/sys/fs/cgroup/pids") / path.lstrip("/")
    return None


OWNER = """
import sys, time
from pathlib import Path
from treadle.data.settings import SandboxSettings
from treadle.runtime.workspace.sandbox import SandboxedWorkspace
from treadle.runtime.tools.bash_session import BashSession
workspace = SandboxedWorkspace(sys.argv[1], SandboxSettings(), create=True)
session = BashSession(workspace.root, start=workspace.shell_command)
session.run("sleep " + sys.argv[2] + " > /dev/null 2>&1 &", 10)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_background_job_dies_when_the_process_running_the_conversation_is_killed(tmp_path):
    marker = f"1000.{uuid.uuid4().int % 10**6}"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "ws"), marker],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "ready"
        # "ready" comes once bash has forked the job, not once the job has exec'd `sleep`
        wait_until(lambda: bool(host_processes_with(f"sleep {marker}")), 30, "the job started")
    finally:
        owner.kill()  # SIGKILL: no close, no finalizer; bubblewrap's --die-with-parent acts
        owner.wait(timeout=30)
        if owner.stdout is not None:
            owner.stdout.close()
    wait_until(lambda: not host_processes_with(f"sleep {marker}"), 30, "the job killed")


def test_a_gigabyte_of_output_is_truncated_without_memory_growth(tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap")
    tools = ToolSet([TerminalTool(max_output_bytes=4000)])
    try:
        shell(tools, workspace, "true")  # the session and its buffers exist before measuring
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # 1 GB through a pipe is seconds of CPU; the deadline is for a machine shared many ways
        result = shell(tools, workspace, "head -c 1000000000 /dev/zero | tr '\\0' x", timeout=1800)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        tools.close()
    assert result.data["exit_code"] == 0
    assert result.data["truncated_bytes"] == 1_000_000_000 - 4000
    assert len(result.content) < 5000
    assert after - before < 50 * 1024, (before, after)  # ru_maxrss is in KiB: < 50 MiB more


def test_the_file_editor_stays_in_the_workspace_of_a_sandbox(tools, tmp_path):
    """The file editor acts from this process, not inside the sandbox: a symlink the sandboxed
    shell makes to a host file must not lead it out (paths are resolved, then checked)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    workspace = workspace_for(tmp_path, "bubblewrap")
    shell(tools, workspace, f"ln -s {secret} leak; ln -s /etc leak-dir; ln -s .. up")
    context = ToolContext(workspace=workspace, secrets=Secrets(), conversation_id="escape")
    attempts = [
        {"command": "view", "path": "leak"},
        {"command": "view", "path": str(secret)},
        {"command": "view", "path": "leak-dir/hostname"},
        {"command": "view", "path": "up/secret.txt"},
        {"command": "create", "path": "up/planted.txt", "file_text": "x"},
        {"command": "str_replace", "path": "leak", "old_str": "host", "new_str": "sandbox"},
    ]
    for arguments in attempts:
        with pytest.raises(ToolCallError, match="outside the workspace"):
            tools.call("file_editor", arguments, context)
    assert secret.read_text() == "host secret\n"
    assert not (tmp_path / "planted.txt").exists()
