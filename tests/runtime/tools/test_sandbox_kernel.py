"""The sandbox's kernel-side layers, attacked through the real tools on real bubblewrap.

Each probe runs through the terminal tool (some through a sandboxed MCP stdio server, a hook or an
eval command too) and, where that makes sense, also with sandbox ``none``, where it must work, so
that a sandbox that quietly stopped holding would be noticed. A kernel setting is only ever
opened for writing and closed without a write: no test changes the host.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.processes import record_cgroups
from support.waiting import wait_until
from treadle.client import TreadleClient
from treadle.data.hooks import HookCommand
from treadle.data.isolation import isolation_text
from treadle.data.mcp import MCPServerConfig
from treadle.data.settings import SandboxLimits
from treadle.environment import shell_environment
from treadle.eval.commands import run_task_command
from treadle.runtime.hooks.process import run_hook
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import (
    ConversationSettings,
    HostProvides,
    SandboxSettings,
    SettingsPolicy,
    build_workspace,
)
from treadle.runtime.tools import ToolContext, ToolResult, ToolSet, builtin_tools
from treadle.runtime.tools.mcp import connect_mcp_tools
from treadle.runtime.tools.mcp_config import MCPLaunch, server_spec
from treadle.runtime.workspace import LocalWorkspace, check_bubblewrap
from treadle.runtime.workspace import sandbox as sandbox_module
from treadle.runtime.workspace.base import SandboxUnavailable
from treadle.runtime.workspace.sandbox import TMPFS_MIB_WITHOUT_MEMORY_LIMIT, SandboxedWorkspace
from treadle.runtime.workspace.sandbox_user import NOBODY_UID, SandboxUser, parse_sandbox_user
from treadle.server.process import ServerProcess

try:
    check_bubblewrap()
except Exception as problem:  # CI installs bubblewrap (make test): this is for a dev machine
    pytest.skip(f"bubblewrap cannot run here: {problem}", allow_module_level=True)

ROOT = os.geteuid() == 0
"""Most host settings are writable by root only: the ``none`` half of a probe needs it."""
PROBE_SERVER = Path(__file__).parent / "kernel_probe_server.py"

KERNEL_SETTINGS = [
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/vm/drop_caches",
    "/proc/sys/kernel/panic",
    "/proc/sysrq-trigger",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/power/state",
]
"""Settings a root process could change; each opened to append and closed, never written."""


def workspace_for(tmp_path: Path, kind: str, **sandbox: object) -> LocalWorkspace:
    settings = ConversationSettings.scripted_inline([], tmp_path / "ws")
    chosen = SandboxSettings(kind=kind, **sandbox)  # type: ignore[arg-type]
    policy = SettingsPolicy(provides=HostProvides(shell_environment=shell_environment()))
    return build_workspace(settings.model_copy(update={"sandbox": chosen}), policy)


@pytest.fixture
def tools() -> Iterator[ToolSet]:
    tool_set = builtin_tools(["terminal"])
    yield tool_set
    tool_set.close()


def shell(tools: ToolSet, workspace: LocalWorkspace, command: str, timeout: float = 60) -> str:
    context = ToolContext(workspace=workspace, secrets=Secrets(), conversation_id="kernel")
    result = tools.call("terminal", {"command": command, "timeout": timeout}, context)
    assert isinstance(result, ToolResult)
    lines = result.content.splitlines()
    if lines and lines[-1].startswith("[exit code"):
        lines.pop()  # the terminal's own note
    return "\n".join(lines)


def open_for_writing(path: str) -> str:
    """A shell line printing ``OPENED path`` when ``path`` opens for writing (O_APPEND, no
    truncation, closed at once without a byte written), else ``REFUSED path``."""
    return f"if (exec 3>>{path}) 2>/dev/null; then echo OPENED {path}; else echo REFUSED {path}; fi"


def syscall(number: int, *args: int | str) -> str:
    """A shell line printing ``errno NAME`` (or ``ok``) for a raw system call, by ctypes in the
    system's python (an argument may be shell text such as ``$!``)."""
    call = ", ".join(str(arg) for arg in (number, *args))
    program = (
        "import ctypes, errno; libc = ctypes.CDLL(None, use_errno=True); "
        f"r = libc.syscall({call}); "
        "print('ok' if r >= 0 else 'errno ' + errno.errorcode[ctypes.get_errno()])"
    )
    return f'/usr/bin/python3 -c "{program}"'


# --- No privilege on the host --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_host_kernel_settings_cannot_be_opened_for_writing(tools, tmp_path, kind):
    if kind == "none" and not ROOT:
        pytest.skip("only root can open the host's settings for writing")
    present = [path for path in KERNEL_SETTINGS if Path(path).exists()]
    workspace = workspace_for(tmp_path, kind)
    output = shell(tools, workspace, "; ".join(open_for_writing(path) for path in present))
    for path in present:
        expected = "REFUSED" if kind == "bubblewrap" else "OPENED"
        assert f"{expected} {path}" in output, output


def test_sys_is_not_shown_and_proc_sys_is_read_only_for_every_kind_of_sandboxed_process(
    tools, tmp_path
):
    workspace = workspace_for(tmp_path, "bubblewrap")
    probe = f"{open_for_writing('/proc/sys/kernel/core_pattern')}; ls /sys 2>/dev/null | wc -l"
    terminal = shell(tools, workspace, probe)
    assert "REFUSED /proc/sys/kernel/core_pattern" in terminal
    assert terminal.splitlines()[1] == "0"  # no /sys at all
    hook = run_hook(HookCommand(command=probe), {}, workspace, mount_files=False)
    assert "REFUSED /proc/sys/kernel/core_pattern" in hook.stdout, hook
    evaluated = run_task_command(
        workspace.root, probe, SandboxSettings(kind="bubblewrap"), timeout_s=60
    )
    assert "REFUSED /proc/sys/kernel/core_pattern" in evaluated.output_tail


def _privilege_battery(host_pid: int) -> tuple[str, list[str]]:
    """One shell line trying each way to privilege on the host (``kernel_setting`` for each
    setting present, then the rest), printing ``NAME WORKED`` or ``NAME REFUSED``; the names."""
    present = [path for path in KERNEL_SETTINGS if Path(path).exists()]
    probes = {f"write:{path}": f"(exec 3>>{path})" for path in present}
    probes |= {
        "read:/proc/keys": "grep -q . /proc/keys",
        "keyctl": f"{syscall(250, 0, -3, 0)} | grep -qx ok",
        "userns": "unshare -U -r true",
        "mount": "mkdir -p mnt && mount -t tmpfs none mnt",
        "mknod": "mknod node c 1 3",
        "signal-host": f"kill -0 {host_pid}",
        "ptrace-host": f"{syscall(101, 16, host_pid, 0, 0)} | grep -qx ok",
    }
    line = "; ".join(
        f"if {probe} 2>/dev/null; then echo {name} WORKED; else echo {name} REFUSED; fi"
        for name, probe in probes.items()
    )
    return line, list(probes)


def test_no_way_to_privilege_from_any_kind_of_sandboxed_process(tools, tmp_path):
    # The terminal, a hook, an eval command and an MCP stdio server: one sandbox built in one
    # place, each tried the same ways (each way shown to work unsandboxed by the tests above).
    host = subprocess.Popen(["sleep", "300"])
    try:
        battery, names = _privilege_battery(host.pid)
        workspace = workspace_for(tmp_path, "bubblewrap")
        outputs = {
            "terminal": shell(tools, workspace, battery),
            "hook": run_hook(HookCommand(command=battery), {}, workspace, mount_files=False).stdout,
            "eval": run_task_command(
                workspace.root, battery, SandboxSettings(kind="bubblewrap"), timeout_s=60
            ).output_tail,
        }
        with mcp_probe(workspace.root) as call:
            outputs["mcp"] = call("run", {"command": battery})
        for kind, output in outputs.items():
            for name in names:
                assert f"{name} REFUSED" in output, (kind, output)
        assert host.poll() is None
        assert not (workspace.root / "node").exists()
    finally:
        host.kill()
        host.wait()


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_root_keyrings_are_not_shown_and_keyctl_is_refused(tools, tmp_path, kind):
    workspace = workspace_for(tmp_path, kind)
    keys = shell(tools, workspace, "cat /proc/keys 2>&1 | grep -c keyring")
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create=0)
    keyctl = shell(tools, workspace, syscall(250, 0, -3, 0))
    add_key = shell(tools, workspace, syscall(248, 0, 0, 0, 0, 0))
    if kind == "bubblewrap":
        assert keys.splitlines()[0] == "0", keys
        assert "Permission denied" in shell(tools, workspace, "cat /proc/keys")
        assert keyctl.splitlines()[0] == "errno EPERM", keyctl
        assert add_key.splitlines()[0] == "errno EPERM", add_key
    else:
        assert int(keys.splitlines()[0]) > 0, keys  # the host's own keyrings
        assert keyctl.splitlines()[0] == "ok", keyctl


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_no_nested_user_namespace_and_no_mount(tools, tmp_path, kind):
    if kind == "none" and not ROOT:
        pytest.skip("mounting in a new mount namespace needs root")
    workspace = workspace_for(tmp_path, kind)
    (workspace.root / "mnt").mkdir()
    probes = {
        "userns": "unshare -U -r true",
        "userns-mount": "unshare -U -r -m sh -c 'mount -t tmpfs none mnt'",
        "mountns": "unshare -m sh -c 'mount -t tmpfs none mnt'",
        "netns": "unshare -n true",
    }
    command = "; ".join(
        f"if {probe} 2>/dev/null; then echo {name} WORKED; else echo {name} REFUSED; fi"
        for name, probe in probes.items()
    )
    output = shell(tools, workspace, command)
    for name in probes:
        expected = "REFUSED" if kind == "bubblewrap" else "WORKED"
        assert f"{name} {expected}" in output, output
    if kind == "bubblewrap":
        mount = shell(tools, workspace, "mount -t tmpfs none mnt")
        assert "permission denied" in mount.lower() or "not permitted" in mount, mount
        # Python asking for a user namespace itself: the filter refuses it too.
        direct = shell(tools, workspace, syscall(272, 0x10000000))
        assert direct.splitlines()[0] == "errno EPERM", direct


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_no_device_node(tools, tmp_path, kind):
    if kind == "none" and not ROOT:
        pytest.skip("mknod needs root")
    workspace = workspace_for(tmp_path, kind)
    output = shell(tools, workspace, "mknod node c 1 3 && echo MADE; true")
    assert ("MADE" in output) is (kind == "none"), output
    assert (workspace.root / "node").exists() is (kind == "none")
    if kind == "bubblewrap":
        output = shell(tools, workspace, "echo x > /dev/made")
        assert "Read-only file system" in output  # /dev is read-only but its devices work
        assert shell(tools, workspace, "echo ok > /dev/null && echo fine").strip() == "fine"
    (workspace.root / "node").unlink(missing_ok=True)


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_a_host_process_cannot_be_signalled_or_traced(tools, tmp_path, kind):
    host = subprocess.Popen(["sleep", "300"])
    traced_host = subprocess.Popen(["sleep", "300"])
    try:
        workspace = workspace_for(tmp_path, kind)
        traced = shell(tools, workspace, syscall(101, 16, traced_host.pid, 0, 0))  # ATTACH
        killed = shell(tools, workspace, f"kill -TERM {host.pid} && echo SIGNALLED")
        if kind == "bubblewrap":
            assert traced.splitlines()[0] == "errno EPERM", traced
            assert "SIGNALLED" not in killed
            assert host.poll() is None
            # Not even its own children: ptrace is refused outright.
            own = shell(tools, workspace, f"sleep 30 & {syscall(101, 16, '$!', 0, 0)}; kill $!")
            assert own.splitlines()[0] == "errno EPERM", own
        else:
            assert traced.splitlines()[0] == "ok", traced
            assert "SIGNALLED" in killed, killed
            wait_until(lambda: host.poll() is not None, 10, "the host process signalled")
    finally:
        for process in (host, traced_host):
            process.kill()
            process.wait()


def test_the_filter_refuses_what_it_cannot_check_and_the_dangerous_calls(tools, tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap")
    expected = {
        "openat2": (syscall(437, -100, 0, 0, 0), "errno ENOSYS"),
        "clone3": (syscall(435, 0, 0), "errno ENOSYS"),
        "io_uring_setup": (syscall(425, 1, 0), "errno EPERM"),
        "bpf": (syscall(321, 0, 0, 0), "errno EPERM"),
        "perf_event_open": (syscall(298, 0, 0, -1, -1, 0), "errno EPERM"),
        "userfaultfd": (syscall(323, 0), "errno EPERM"),
        "setns": (syscall(308, 0, 0), "errno EPERM"),
        "process_vm_readv": (syscall(310, 1, 0, 0, 0, 0, 0), "errno EPERM"),
        "x32 getpid": (syscall(0x40000000 | 39), "errno EPERM"),
        "TIOCSTI": (syscall(16, 0, 0x5412, 0), "errno EPERM"),
    }
    for name, (command, answer) in expected.items():
        output = shell(tools, workspace, command)
        assert output.splitlines()[0] == answer, (name, output)
    # What libc does every day still works: threads, processes, files, pipes.
    daily = "python3 -c 'import threading, subprocess; t = threading.Thread(target=print); "
    daily += 't.start(); t.join(); print(subprocess.run(["echo", "spawned"]).returncode)\''
    assert shell(tools, workspace, daily).splitlines()[-2:] == ["spawned", "0"]


# --- No setuid or setgid file, ever ---------------------------------------------------------


SETUID_ATTEMPTS = (
    "cp /bin/bash rootsh; chmod 4755 rootsh",
    "cp /bin/bash rootsh2; chmod u+s rootsh2",
    "cp /bin/bash setgid; chmod g+s setgid",
    "install -m 4755 /bin/true installed",
    "mkdir -m 2755 sgid-dir",
    "/usr/bin/python3 -c \"import os; os.close(os.open('py-open', os.O_CREAT | os.O_WRONLY, 0o4755))\"",
    "/usr/bin/python3 -c \"import os; os.mknod('py-mknod', 0o104755)\"",
    "/usr/bin/python3 -c \"import os; open('py-fchmod', 'w').close(); "
    "fd = os.open('py-fchmod', os.O_RDONLY); os.fchmod(fd, 0o6755)\"",
    "touch at; /usr/bin/python3 -c \"import os; os.chmod('at', 0o4755, dir_fd=os.open('.', os.O_RDONLY))\"",
    "cp -p /usr/bin/passwd passwd-copy 2>/dev/null || true",
    "/usr/bin/python3 -c \"import os; os.close(os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o4755))\"",
)


def setid_files(root: Path) -> list[str]:
    """The scan (the test's check, never the defence): files under ``root`` with S_ISUID or
    S_ISGID."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if mode & (stat.S_ISUID | stat.S_ISGID):
            found.append(f"{path.relative_to(root)} {oct(mode)}")
    return found


@pytest.mark.parametrize("kind", ["bubblewrap", "none"])
def test_no_setuid_or_setgid_file_can_be_made(tools, tmp_path, kind):
    workspace = workspace_for(tmp_path, kind)
    output = shell(tools, workspace, "; ".join(SETUID_ATTEMPTS) + "; ls -l", timeout=120)
    found = setid_files(workspace.root)
    if kind == "bubblewrap":
        assert found == [], (found, output)
        assert output.count("Operation not permitted") >= 5, output
        # The same files without the bits are fine.
        shell(tools, workspace, "chmod 755 rootsh && mkdir -m 755 plain-dir && touch made")
        assert (workspace.root / "plain-dir").is_dir()
        assert (workspace.root / "made").exists()
    else:
        assert len(found) >= 6, (found, output)  # the probe can tell


def test_no_setuid_file_from_a_hook_an_eval_command_or_an_mcp_server(tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap")
    attempt = "cp /bin/bash rootsh-$0; chmod 4755 rootsh-$0; mkdir -m 2755 dir-$0"
    run_hook(HookCommand(command=attempt.replace("$0", "hook")), {}, workspace, mount_files=False)
    run_task_command(
        workspace.root,
        attempt.replace("$0", "eval"),
        SandboxSettings(kind="bubblewrap"),
        timeout_s=60,
    )
    with mcp_probe(workspace.root) as call:
        answer = call("run", {"command": attempt.replace("$0", "mcp")})
    assert "Operation not permitted" in answer, answer
    assert sorted(p.name for p in workspace.root.iterdir()) == [
        "rootsh-eval",
        "rootsh-hook",
        "rootsh-mcp",
    ]
    assert setid_files(workspace.root) == []


# --- Bounded --------------------------------------------------------------------------------


def test_a_tmpfs_has_a_size_when_memory_is_unlimited(tools, tmp_path):
    # Not the kernel's default (half the machine's memory, for each of three tmpfs).
    workspace = workspace_for(tmp_path, "bubblewrap", limits={"memory_mib": None})
    assert workspace.isolation["tmpfs_mib"] == TMPFS_MIB_WITHOUT_MEMORY_LIMIT
    sizes = shell(tools, workspace, "df -k --output=size,target /tmp /dev/shm $HOME")
    rows = dict(reversed(line.split()) for line in sizes.splitlines()[1:4])
    expected = str(TMPFS_MIB_WITHOUT_MEMORY_LIMIT * 1024)
    assert rows["/tmp"] == rows["/dev/shm"] == rows["/home/sandbox"] == expected, sizes


def test_every_tmpfs_has_a_size_and_dev_is_read_only(tools, tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap", limits={"memory_mib": 64})
    assert workspace.isolation["tmpfs_mib"] == 32
    sizes = shell(tools, workspace, "df -k --output=size,target /tmp /dev/shm $HOME /dev")
    rows = dict(reversed(line.split()) for line in sizes.splitlines()[1:5])
    assert rows["/tmp"] == rows["/dev/shm"] == rows["/home/sandbox"] == str(32 * 1024), sizes
    for place in ("/tmp", "/dev/shm", "$HOME"):
        output = shell(
            tools, workspace, f"dd if=/dev/zero of={place}/big bs=1M count=40; ls -l {place}/big"
        )
        assert "No space left on device" in output, output
        assert f" {32 * 1024 * 1024} " in output, output
        shell(tools, workspace, f"rm {place}/big")
    assert "Read-only file system" in shell(tools, workspace, "dd if=/dev/zero of=/dev/big count=1")


def test_the_sandboxs_memory_is_one_total_tmpfs_pages_included(tools, tmp_path, monkeypatch):
    made = record_cgroups(monkeypatch)
    workspace = workspace_for(tmp_path, "bubblewrap", limits={"memory_mib": 64})
    if workspace.isolation["memory_scope"] != "sandbox":
        assert workspace.isolation["memory_scope"] == "process"  # and says so
        pytest.skip("no memory cgroup can be made here: the memory limit is per process")
    # Each tmpfs holds 32 MiB at most; three of them full would be 96 MiB, past the 64 MiB.
    fill = "; ".join(
        f"dd if=/dev/zero of={place}/fill bs=1M count=30 2>/dev/null"
        for place in ("/tmp", "/dev/shm", "$HOME")
    )
    output = shell(tools, workspace, f"{fill}; echo ALL-HELD", timeout=120)
    assert "ALL-HELD" not in output, output  # the sandbox's memory ran out: it was stopped
    # The terminal starts a new sandbox; the old one's cgroup is gone with it.
    assert shell(tools, workspace, "echo again").strip() == "again"
    tools.close()
    assert any("/memory/" in str(path) for path in made), made
    assert [path for path in made if path.exists()] == []


# --- Nothing leaks in by inheritance --------------------------------------------------------


@contextlib.contextmanager
def mcp_probe(workspace: Path, errlog: io.TextIOBase | None = None) -> Iterator:
    launch = MCPLaunch(
        name="probe",
        config=MCPServerConfig(command=sys.executable, args=(str(PROBE_SERVER),)),
        sandboxed=True,
        environ=dict(os.environ),
    )
    spec = server_spec(launch, Secrets(), workspace, limits=SandboxLimits())
    log = errlog if errlog is not None else io.StringIO()
    tool_set = ToolSet(connect_mcp_tools(spec, errlog=log))  # type: ignore[arg-type]
    context = ToolContext(
        workspace=LocalWorkspace(workspace), secrets=Secrets(), conversation_id="kernel"
    )

    def call(name: str, arguments: dict) -> str:
        result = tool_set.call(name, arguments, context)
        return result.content

    try:
        yield call
    finally:
        tool_set.close()
    if spec.pids_cgroup is not None:  # its cgroups (pids, and memory beside it) are gone
        name = Path(spec.pids_cgroup).name
        assert not Path(spec.pids_cgroup).exists()
        assert not (Path("/sys/fs/cgroup/memory") / name).exists()


def test_an_mcp_server_never_reaches_the_descriptors_of_the_process_running_it(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log_path = tmp_path / "server.log"
    secret = f"operator-log-line-{uuid.uuid4().hex}"
    with log_path.open("w+") as log:
        log.write(secret + "\n")
        log.flush()
        with mcp_probe(workspace, log) as call:
            descriptors = call("descriptors", {})
            reopened = call("read_own_stderr", {})
            probes = call("run", {"command": open_for_writing("/proc/sys/kernel/core_pattern")})
            call("to_stderr", {"text": "from-the-server \x1b]0;title\x07"})
        log.seek(0)
        logged = log.read()
    assert str(log_path) not in descriptors, descriptors
    assert secret not in reopened, reopened
    assert [line.split()[0] for line in descriptors.splitlines()][:3] == ["0", "1", "2"]
    assert all("pipe:" in line or "/dev/null" in line for line in descriptors.splitlines()[:3])
    assert "REFUSED" in probes
    assert logged.startswith(secret)  # nothing was appended to it but the relayed lines
    wait_until(lambda: "from-the-server" in log_path.read_text(), 10, "stderr relayed")
    assert "[mcp probe] from-the-server \\x1b]0;title\\x07" in log_path.read_text()

    # The probe can tell: a server handed the log itself, as before, reads it back.
    with log_path.open("a") as handed:
        leaked = subprocess.run(
            [sys.executable, "-c", READ_FD2],
            stderr=handed,
            capture_output=False,
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
    assert secret in leaked.stdout


READ_FD2 = "import os; print(os.read(os.open('/proc/self/fd/2', os.O_RDONLY), 65536).decode())"


def test_the_stderr_relay_shows_control_characters_and_is_bounded(tmp_path):
    from treadle.runtime.tools.stderr_relay import MAX_RELAYED_BYTES, StderrRelay

    target = io.StringIO()
    relay = StderrRelay("x", target)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; sys.stderr.write('\\x1b]52;c;aGk=\\x07title\\n' + 'y' * 3000000)",
        ],
        stderr=relay.writer,
    )
    relay.close_writer()
    child.wait()
    assert relay.join(10)
    text = target.getvalue()
    assert "\x1b" not in text
    assert "\x07" not in text
    assert text.startswith("[x] \\x1b]52;c;aGk=\\x07title\n")
    assert len(text) < MAX_RELAYED_BYTES + 70_000
    assert "[stderr cut" in text


def test_a_hook_and_the_terminal_get_descriptors_of_their_own(tools, tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap")
    listing = "ls /proc/self/fd | sort -n | tr '\\n' ' '"
    hook = run_hook(HookCommand(command=listing), {}, workspace, mount_files=False)
    assert hook.stdout.split() == ["0", "1", "2", "3"], hook  # 3: ls's own listing
    terminal = shell(tools, workspace, listing)
    assert terminal.split() == ["0", "1", "2", "3"], terminal


# --- Missing defences refuse to start -------------------------------------------------------


def refused(monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    sandbox_module._bubblewrap_problem.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match=reason):
            check_bubblewrap()
    finally:
        monkeypatch.undo()
        sandbox_module._bubblewrap_problem.cache_clear()


@pytest.mark.skipif(not ROOT, reason="/proc/sys is writable to root only")
def test_a_sandbox_whose_kernel_settings_stay_writable_is_refused(monkeypatch):
    monkeypatch.setattr(sandbox_module, "kernel_settings_mounts", lambda: ())
    refused(monkeypatch, r"/proc/sys\) stay writable")


def test_a_sandbox_without_its_seccomp_filter_is_refused(monkeypatch):
    real = sandbox_module.bwrap_argv

    def without_filter(layout, bwrap=sandbox_module.BWRAP):
        argv = real(layout, bwrap)
        at = argv.index("--seccomp")
        return argv[:at] + argv[at + 2 :]

    monkeypatch.setattr(sandbox_module, "bwrap_argv", without_filter)
    refused(monkeypatch, "seccomp filter")


def test_a_machine_the_filter_does_not_know_is_refused(monkeypatch):
    from treadle.runtime.workspace import seccomp

    monkeypatch.setattr(seccomp.platform, "machine", lambda: "riscv64")
    seccomp.filter_program.cache_clear()
    try:
        refused(monkeypatch, "not riscv64")
    finally:
        seccomp.filter_program.cache_clear()


# --- Who owns the files ---------------------------------------------------------------------


NOBODY = SandboxUser(NOBODY_UID, NOBODY_UID)
needs_root = pytest.mark.skipif(not ROOT, reason="only root starts a sandbox as another user")


@pytest.fixture
def reachable(tmp_path: Path) -> Iterator[Path]:
    """A folder another user can pass through (pytest's own are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="treadle-kernel-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_root
def test_the_sandbox_runs_as_the_workspaces_owner_when_that_is_not_root(tools, reachable):
    root = reachable / "users-folder"
    root.mkdir()
    os.chown(root, NOBODY.uid, NOBODY.gid)
    workspace = SandboxedWorkspace(root, SandboxSettings())
    assert workspace.isolation["user"] == {
        "uid": NOBODY.uid,
        "gid": NOBODY.gid,
        "capabilities": "none",
    }
    assert f"as uid {NOBODY.uid}, no capabilities" in isolation_text(workspace.isolation)
    output = shell(tools, workspace, "id -u; id -G; touch made; mkdir dir; echo done")
    assert output.splitlines()[:2] == [str(NOBODY.uid), str(NOBODY.gid)], output
    for name in ("made", "dir"):
        assert (root / name).stat().st_uid == NOBODY.uid
    # Every layer holds for that user as for root.
    probes = f"{open_for_writing('/proc/sys/kernel/core_pattern')}; cp /bin/sh s; chmod 4755 s"
    assert "REFUSED" in shell(tools, workspace, probes)
    assert setid_files(root) == []
    hook = run_hook(HookCommand(command="id -u"), {}, workspace, mount_files=False)
    assert hook.stdout.strip() == str(NOBODY.uid), hook
    evaluated = run_task_command(root, "id -u", SandboxSettings(), timeout_s=60)
    assert evaluated.output_tail.strip() == str(NOBODY.uid)


@needs_root
def test_root_in_roots_own_folder_keeps_uid_0_without_capabilities(tools, tmp_path):
    workspace = workspace_for(tmp_path, "bubblewrap")
    assert workspace.isolation["user"] == {"uid": 0, "gid": 0, "capabilities": "none"}
    status = shell(tools, workspace, "id -u; grep CapEff /proc/self/status")
    assert status.splitlines() == ["0", "CapEff:\t0000000000000000"], status


@needs_root
def test_a_workspace_its_user_cannot_reach_is_refused_with_the_folder_named(tmp_path):
    private = tmp_path / "private"  # under pytest's folder, private to root
    private.mkdir(mode=0o700)
    with pytest.raises(SandboxUnavailable, match="cannot reach"):
        SandboxedWorkspace(private / "ws", SandboxSettings(), create=True, user=NOBODY)


@needs_root
def test_a_workspace_made_for_a_sandbox_user_is_owned_by_it(reachable):
    workspace = SandboxedWorkspace(reachable / "new", SandboxSettings(), create=True, user=NOBODY)
    assert workspace.root.stat().st_uid == NOBODY.uid
    assert workspace.user == NOBODY


def test_a_sandbox_user_is_a_name_or_a_uid():
    assert parse_sandbox_user("0") == SandboxUser(0, 0)
    assert parse_sandbox_user("root") == SandboxUser(0, 0)
    assert parse_sandbox_user("4000000") == SandboxUser(4000000, 4000000)  # unknown: gid=uid
    with pytest.raises(ValueError, match="no user 'no-such-user-here'"):
        parse_sandbox_user("no-such-user-here")
    with pytest.raises(ValueError, match="out of range"):
        parse_sandbox_user("99999999999")


@needs_root
def test_a_server_run_by_root_gives_its_workspaces_and_sandboxes_to_nobody(reachable, tmp_path):
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'server.db'}",
        log_dir=tmp_path,
        workspace_root=reachable,
        sandbox_user=None,  # the server's own default
    ).start()
    try:
        with TreadleClient(server.base_url) as client:
            command = "id -u; touch made"
            responses = [
                {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]},
                {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
            ]
            folder = reachable / "conversation-1"  # not there yet: the server makes it
            settings = ConversationSettings.scripted_inline(responses, folder)
            conversation = client.create_conversation(settings)
            conversation.send_message("go")
            conversation.run()
            output = next(e for e in conversation.active_path() if e.kind == "observation")
            isolation = conversation.info().isolation
    finally:
        server.stop()
    assert folder.stat().st_uid == NOBODY_UID
    assert output.content.splitlines()[0] == str(NOBODY_UID), output.content
    assert (folder / "made").stat().st_uid == NOBODY_UID
    assert isolation is not None
    assert isolation.user == {"uid": NOBODY_UID, "gid": NOBODY_UID, "capabilities": "none"}


def test_serve_names_a_sandbox_user_it_cannot_use():
    done = subprocess.run(
        [sys.executable, "-m", "treadle", "serve", "--sandbox-user", "no-such-user-here"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no user 'no-such-user-here'" in done.stderr


def test_the_filter_lives_in_a_sealed_memfd_of_this_process_not_on_disk():
    from treadle.runtime.workspace import seccomp

    path = seccomp.filter_file()
    assert path.parent == Path(f"/proc/{os.getpid()}/fd")
    assert path.read_bytes() == seccomp.filter_program()
    with pytest.raises(PermissionError):
        path.open("wb")  # sealed: nobody can change the filter sandboxes load
    assert seccomp.filter_file() == path  # one per process
