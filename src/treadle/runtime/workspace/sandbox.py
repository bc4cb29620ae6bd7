"""A workspace whose tools run inside a bubblewrap sandbox (``SandboxedWorkspace``), and the one
builder of every sandbox's command line (``bwrap_argv``: terminal, hooks, eval commands, MCP
stdio servers).

Inside: the workspace read-write at its own path; the system read-only (/usr, /bin, /lib*, the
parts of /etc a shell and common tools read); a private HOME, /tmp and /dev/shm, each sized; a
read-only /dev; a process namespace of its own (``/proc`` shows only the sandbox); no network
unless the settings turn it on (then the host's network, its services on 127.0.0.1 included) or
give an allow list (then a network namespace of its own still, whose only way out is the proxy of
``network_proxy``, bound inside it); a clean environment (PATH, HOME, LANG, TERM and the secrets
the user exports). The kernel-side layers, whatever uid it runs as (``sandbox_user``): a user
namespace of its own in which no other can be made, every capability dropped, the kernel's
settings (/proc/sys and friends) read-only, /sys and the keyrings hidden, and a seccomp filter
(``seccomp``). Resource limits are set on the shell before bubblewrap starts, so every process
inherits them; the number of processes and the memory in all are held by cgroups of their own
when this process may make them (as root on a cgroup v1 host), else they are recorded as
unlimited and per process.

Lifetime: bubblewrap runs with ``--die-with-parent`` and the shell is the process namespace's
only command, so when the conversation closes its terminal (or the process running it dies) the
shell exits and every process of the sandbox, background jobs included, is killed with it; the
cgroups are then emptied and removed.

File tools do not run inside the sandbox: they act from this process below an open descriptor
of the workspace (``workspace.confined.ConfinedRoot``, openat2 with RESOLVE_BENEATH), so no path,
link or folder swapped meanwhile leads out, as for a local workspace.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treadle.data.network import allow_list
from treadle.data.settings import SandboxLimits, SandboxSettings
from treadle.runtime.workspace import seccomp
from treadle.runtime.workspace.base import SandboxUnavailable, WorkspaceError
from treadle.runtime.workspace.local import LocalWorkspace
from treadle.runtime.workspace.network_proxy import SandboxNetwork, proxy_problem
from treadle.runtime.workspace.sandbox_user import (
    SandboxUser,
    effective_user,
    sandbox_user,
    unreachable_folder,
)
from treadle.runtime.workspace.shell import DEFAULT_PATH, PidsCgroup, ShellCommand, launch_argv

BWRAP = "/usr/bin/bwrap"

SANDBOX_HOME = "/home/sandbox"
"""The private, empty HOME inside the sandbox (a tmpfs)."""
PRIVATE_DIR_INSIDE = "/tmp/.treadle-terminal"
"""Where the terminal's command file is shown, read-only, inside the sandbox's own /tmp."""

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Read-only, or recreated as the same symlinks (merged /usr)."""

ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "gitconfig",
    "group",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "passwd",
    "resolv.conf",
    "ssl",
)
"""The parts of /etc shown read-only: what a shell and its common tools read (users, name
resolution, the loader, certificates, Debian's alternatives such as awk). Not shadow files,
host keys, package-manager credentials (pip.conf, .npmrc) or service configuration. Kept short:
each entry is a bind mount, and they make most of a sandbox's start time."""

LAYERS = ("user_namespace", "no_nested_user_namespaces", "seccomp", "kernel_settings_read_only")
"""The kernel-side defences every sandbox has (a sandbox without one is refused, never started
weaker), as the isolation fact lists them."""

RLIMITS = {
    "memory_mib": ("RLIMIT_AS", 1024 * 1024),
    "file_size_mib": ("RLIMIT_FSIZE", 1024 * 1024),
    "cpu_seconds": ("RLIMIT_CPU", 1),
}
"""Settings limit -> (resource limit, its unit in the limit's own unit)."""


class SandboxedWorkspace(LocalWorkspace):
    """A local folder whose shell runs in a bubblewrap sandbox made from ``sandbox``.
    Opening it checks that bubblewrap can start here: ``SandboxUnavailable`` says why not
    and how to fix it (never a silent fallback to no sandbox)."""

    def __init__(
        self,
        root: str | Path,
        sandbox: SandboxSettings,
        *,
        state_dir: str | Path | None = None,
        create: bool = False,
        within: str | Path | None = None,
        environment: Mapping[str, str] | None = None,
        bwrap: str = BWRAP,
        user: SandboxUser | None = None,
    ) -> None:
        if sandbox.kind != "bubblewrap":
            raise WorkspaceError(f"a sandboxed workspace needs kind bubblewrap, not {sandbox.kind}")
        made = create and not Path(root).expanduser().exists()
        super().__init__(root, state_dir=state_dir, create=create, within=within)
        self._sandbox = sandbox
        self._bwrap = bwrap
        self._user = sandbox_user(self.root, user)
        if made and self._user is not None:  # a folder made here for the sandbox is its own
            os.chown(self.root, self._user.uid, self._user.gid)
        if self._user is not None and (blocked := unreachable_folder(self.root, self._user)):
            raise SandboxUnavailable(
                f"the sandbox runs as uid {self._user.uid} (the workspace's owner, or the "
                f"server's --sandbox-user), who cannot reach {blocked}: let it through "
                f"(chmod o+x {blocked}), put the workspace elsewhere, or choose another "
                "--sandbox-user"
            )
        self._lang = (environment or {}).get("LANG") or "C.UTF-8"
        for mount in sandbox.mounts_ro:
            if not Path(mount).exists():
                raise WorkspaceError(f"--mount-ro {mount}: no such path on this machine")
        if allow_list(sandbox.network) is not None and (problem := proxy_problem()):
            raise SandboxUnavailable(f"the sandbox cannot start: {problem}")
        check_bubblewrap(bwrap, self._user)
        # Whether processes and memory can be counted is known once per process.
        self._processes = processes_limit(sandbox.limits.processes)
        self._memory_bytes = memory_limit(sandbox.limits.memory_mib)
        self._networks: list[SandboxNetwork] = []

    @property
    def sandbox(self) -> SandboxSettings:
        return self._sandbox

    @property
    def user(self) -> SandboxUser | None:
        """The host user the sandbox runs as when not this process's (``sandbox_user``)."""
        return self._user

    @property
    def isolation(self) -> dict[str, Any]:
        limits = self._sandbox.limits.model_dump()
        limits["processes"] = self._processes
        return {
            "sandbox": "bubblewrap",
            "network": self._sandbox.network,
            "mounts_ro": list(self._sandbox.mounts_ro),
            "limits": limits,
            "memory_scope": self._memory_scope,
            "tmpfs_mib": _mib(tmpfs_bytes(self._sandbox.limits)),
            "layers": list(LAYERS),
            "user": effective_user(self._user).fact(),
        }

    @property
    def _memory_scope(self) -> str | None:
        """``sandbox`` (one total for all its processes, in a memory cgroup), ``process``
        (each process's address space only) or None (no memory limit)."""
        if self._sandbox.limits.memory_mib is None:
            return None
        return "sandbox" if self._memory_bytes is not None else "process"

    def shell_command(self, shell_argv: list[str], private_dir: Path) -> ShellCommand:
        if self._user is not None:  # bubblewrap, as that user, shows it read-only
            os.chown(private_dir, self._user.uid, self._user.gid)
        cgroup = sandbox_cgroup(self._processes, self._memory_bytes)
        rlimits = sandbox_rlimits(self._sandbox.limits)
        env = {"PATH": DEFAULT_PATH, "HOME": SANDBOX_HOME, "LANG": self._lang, "TERM": "dumb"}
        argv: tuple[str, ...] = (*self._bwrap_argv(private_dir), *shell_argv)
        allow = allow_list(self._sandbox.network)
        if allow is not None:
            # Its own: it binds inside this sandbox and ends when the sandbox does.
            network = SandboxNetwork(allow)
            self._networks = [*(n for n in self._networks if not n.finished), network]
            argv = network.wrap(argv)
            env.update(network.environment)
        return ShellCommand(
            argv=argv,
            env=env,
            private_dir_inside=Path(PRIVATE_DIR_INSIDE),
            rlimits=rlimits,
            cgroup=cgroup,
            sandboxed=True,
            files=sandbox_files(),
            user=self._user,
        )

    def close(self) -> None:
        """Stop the allow-list proxies of this workspace's sandboxes (each also ends with its
        sandbox on its own)."""
        networks, self._networks = self._networks, []
        for network in networks:
            network.close()

    def _bwrap_argv(self, private_dir: Path) -> list[str]:
        layout = SandboxLayout(
            workspace=self.root,
            network=self._sandbox.network,
            mounts_ro=self._sandbox.mounts_ro,
            tmpfs_bytes=tmpfs_bytes(self._sandbox.limits),
            binds_ro=((str(private_dir), PRIVATE_DIR_INSIDE),),
        )
        return bwrap_argv(layout, self._bwrap)

    def __repr__(self) -> str:
        return f"SandboxedWorkspace({str(self.root)!r}, network={self._sandbox.network})"


def sandbox_rlimits(limits: SandboxLimits) -> dict[str, int]:
    """The per-process resource limits of a sandbox (``RLIMITS``), by resource name."""
    return {
        RLIMITS[name][0]: value * RLIMITS[name][1]
        for name, value in limits.model_dump().items()
        if name in RLIMITS and value is not None
    }


SECCOMP_FD = 9
"""The descriptor bubblewrap reads the seccomp filter from (``ShellCommand.files`` opens it)."""

KERNEL_SETTINGS_RO = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
"""Shown read-only over the sandbox's own /proc (those this kernel has): the kernel's settings
(``core_pattern``, ``drop_caches``, ...), the magic SysRq key and device tables, which uid 0
without capabilities could otherwise write (bubblewrap 0.8 leaves them writable to a root
sandbox). /sys is not shown at all."""
PROC_HIDDEN = ("/proc/keys", "/proc/key-users")
"""Covered by /dev/null on a nodev mount (reading them is refused): the host's keyrings, root's
included, and who holds keys. keyctl itself is refused by the seccomp filter."""


@dataclass(frozen=True)
class SandboxLayout:
    """What one sandbox shows and allows: the workspace (read-write, at its own path, where
    the command starts unless ``chdir``), the network (``off``: a namespace of its own with
    only loopback), host paths read-only (``mounts_ro`` at their own path, ``binds_ro`` as
    ``(source, destination)``), and each private tmpfs's size in bytes (``tmpfs_bytes``)."""

    workspace: Path
    network: str
    tmpfs_bytes: int
    mounts_ro: Sequence[str] = ()
    binds_ro: Sequence[tuple[str, str]] = ()
    chdir: str | None = None


def bwrap_argv(layout: SandboxLayout, bwrap: str = BWRAP) -> list[str]:
    """bubblewrap's command line (up to ``--``) for ``layout``: the one place every sandbox
    (terminal, hooks, eval commands, MCP stdio servers) is built, layer by layer. The caller
    appends the command and opens ``seccomp_file()`` as descriptor ``SECCOMP_FD``."""
    argv = [bwrap, "--die-with-parent"]
    # A user namespace of its own, in which no further one can be made (a nested namespace
    # would hold every capability again); every capability dropped, even for root outside.
    argv += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox"]
    argv += ["--unshare-cgroup-try"]
    # The network: off is a namespace of its own with loopback only, and so is an allow list
    # (its only way out is the proxy bound inside it); on shares the host's.
    if layout.network != "on":
        argv.append("--unshare-net")
    argv += ["--seccomp", str(SECCOMP_FD)]
    argv += system_mounts()
    argv += ["--proc", "/proc", *kernel_settings_mounts()]
    for hidden in PROC_HIDDEN:
        argv += ["--ro-bind", "/dev/null", hidden]
    # /dev: bubblewrap's own (null, zero, random, tty, a private pts), made read-only after a
    # sized /dev/shm is mounted in it: its tmpfs has no size of its own.
    argv += ["--dev", "/dev", *_sized(layout.tmpfs_bytes), "--tmpfs", "/dev/shm"]
    argv += ["--remount-ro", "/dev"]
    argv += [*_sized(layout.tmpfs_bytes), "--tmpfs", "/tmp"]
    argv += [*_sized(layout.tmpfs_bytes), "--tmpfs", SANDBOX_HOME]
    for source, destination in layout.binds_ro:
        argv += ["--ro-bind", source, destination]
    for mount in layout.mounts_ro:
        argv += ["--ro-bind", mount, mount]
    root = str(layout.workspace)
    argv += ["--bind", root, root, "--chdir", layout.chdir or root, "--"]
    return argv


def _mib(size: int | None) -> int | None:
    return None if size is None else size // (1024 * 1024)


def _sized(size: int) -> list[str]:
    return ["--size", str(size)]


TMPFS_MIB_WITHOUT_MEMORY_LIMIT = 2048
"""Each tmpfs's size when memory is unlimited (``memory_mib`` null): the default limit's half.
Never the kernel's own default (half the machine's memory, for each of three tmpfs): their
pages are the host's shared memory, which no address-space limit counts."""


def tmpfs_bytes(limits: SandboxLimits) -> int:
    """The size of each of the sandbox's tmpfs (/tmp, HOME, /dev/shm): half the memory limit,
    or ``TMPFS_MIB_WITHOUT_MEMORY_LIMIT`` without one. In a memory cgroup their pages count
    towards the sandbox's one total as well; without one, they are bounded by these sizes."""
    mib = TMPFS_MIB_WITHOUT_MEMORY_LIMIT * 2 if limits.memory_mib is None else limits.memory_mib
    return mib * 1024 * 1024 // 2


def sandbox_files() -> tuple[tuple[int, Path], ...]:
    """What the launcher opens for bubblewrap: the seccomp filter as ``SECCOMP_FD``
    (``SeccompUnsupported`` on a machine the filter does not know)."""
    return ((SECCOMP_FD, seccomp.filter_file()),)


@functools.cache
def kernel_settings_mounts() -> tuple[str, ...]:
    """``--ro-bind`` over the sandbox's /proc for each of ``KERNEL_SETTINGS_RO`` this kernel
    has. (The host's /proc/sys shows the reader's own namespaces: the sandbox's network.)"""
    argv: list[str] = []
    for path in KERNEL_SETTINGS_RO:
        if Path(path).exists():
            argv += ["--ro-bind", path, path]
    return tuple(argv)


@functools.cache
def system_mounts() -> tuple[str, ...]:
    """bwrap options showing the system read-only, mirroring the host's layout."""
    argv: list[str] = []
    for folder in SYSTEM_DIRS:
        path = Path(folder)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), folder]
        elif path.is_dir():
            argv += ["--ro-bind", folder, folder]
    etc = Path("/etc")
    for name in ETC_ENTRIES:
        if (etc / name).exists():
            argv += ["--ro-bind", str(etc / name), str(etc / name)]
    return tuple(argv)


_LAYERS_CHECK = (
    'grep -q "^Seccomp:[[:space:]]*2" /proc/self/status || { echo "seccomp: no filter" >&2; '
    "exit 3; }; if (exec 3>>/proc/sys/kernel/core_pattern) 2>/dev/null; then "
    'echo "/proc/sys: writable" >&2; exit 4; fi'
)
"""Run in a probe sandbox: its filter is loaded, and the kernel's settings cannot be opened for
writing (opened to append, closed without writing: nothing is changed, even if it could)."""


@functools.cache
def _bubblewrap_problem(bwrap: str, user: SandboxUser | None = None) -> str | None:
    """Why bubblewrap cannot start a sandbox with every layer here (None: it can), tried once
    per process (and user) with the sandbox's own command line."""
    if not Path(bwrap).exists():
        return (
            f"bubblewrap is not installed ({bwrap} is missing): install it (Debian/Ubuntu: "
            "apt-get install bubblewrap)"
        )
    try:
        files = sandbox_files()
    except SandboxUnavailable as error:
        return str(error)
    with tempfile.TemporaryDirectory(prefix="treadle-probe-") as folder:
        if user is not None:
            os.chown(folder, user.uid, user.gid)
        layout = SandboxLayout(workspace=Path(folder), network="off", tmpfs_bytes=1 << 20)
        probe = ShellCommand(
            argv=(*bwrap_argv(layout, bwrap), "/bin/sh", "-c", _LAYERS_CHECK),
            env={"PATH": DEFAULT_PATH},
            private_dir_inside=Path(folder),
            files=files,
            user=user,
        )
        try:
            done = subprocess.run(
                launch_argv(probe, controlling_terminal=False),
                capture_output=True,
                stdin=subprocess.DEVNULL,
                env=dict(probe.env),
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bubblewrap could not run: {error}"
    said = done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
    if done.returncode == 0:
        return None
    if "--disable-userns" in said or "Unknown option" in said:
        return (
            f"this bubblewrap is too old ({said}): the sandbox needs bubblewrap 0.8 or later "
            "(--disable-userns); install a newer one"
        )
    if said.startswith("seccomp:") or "seccomp" in said.lower():
        return (
            f"the kernel did not load the sandbox's seccomp filter ({said}): it needs a kernel "
            "built with CONFIG_SECCOMP_FILTER (every distribution kernel is)"
        )
    if said.startswith("/proc/sys:"):
        return (
            "the kernel's settings (/proc/sys) stay writable in the sandbox although they are "
            "mounted read-only: update bubblewrap and the kernel"
        )
    return (
        f"bubblewrap cannot make a sandbox here ({said}); it needs user namespaces "
        "(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0, or on "
        "Ubuntu an AppArmor profile for bwrap) or to run as root"
    )


def check_bubblewrap(bwrap: str = BWRAP, user: SandboxUser | None = None) -> None:
    """``SandboxUnavailable`` naming why bubblewrap cannot run here (as ``user``, default this
    process's) and how to fix it."""
    problem = _bubblewrap_problem(bwrap, user)
    if problem is not None:
        raise SandboxUnavailable(
            f"the sandbox cannot start: {problem}; or run without a sandbox, explicitly, "
            "with --sandbox none (the tools then act as your user on the whole machine)"
        )


@functools.cache
def _can_count_processes() -> bool:
    probe = PidsCgroup.create(8)
    if probe is None:
        return False
    probe.kill()
    return True


@functools.cache
def _can_limit_memory() -> bool:
    probe = PidsCgroup.create(8, memory_bytes=64 * 1024 * 1024)
    if probe is None:
        return False
    probe.kill()
    return probe.memory is not None


def memory_limit(memory_mib: int | None) -> int | None:
    """The sandbox's memory total in bytes when a memory cgroup can hold it (beside its pids
    cgroup), None when this process cannot make one: the limit is then per process only
    (RLIMIT_AS), and the isolation fact says so (``memory_scope``)."""
    if memory_mib is None or not _can_limit_memory():
        return None
    return memory_mib * 1024 * 1024


UNCOUNTED_PROCESSES = 4_194_304
"""pids.max of a cgroup made for the memory total only: Linux's largest pid, no limit."""


def sandbox_cgroup(processes: int | None, memory_bytes: int | None) -> PidsCgroup | None:
    """The cgroups holding one sandbox to ``processes`` and ``memory_bytes`` (None: neither
    is limited); ``SandboxUnavailable`` when they could be made when the sandbox was opened
    but cannot be now."""
    if processes is None and memory_bytes is None:
        return None
    cgroup = PidsCgroup.create(processes or UNCOUNTED_PROCESSES, memory_bytes=memory_bytes)
    if cgroup is None:
        raise SandboxUnavailable(
            "the cgroups that hold the sandbox to its limits (processes, memory) could not be "
            "made now; free cgroups, or run with limits.processes and limits.memory_mib null"
        )
    return cgroup


def processes_limit(wanted: int | None) -> int | None:
    """The process limit the sandbox really gets: ``wanted`` when a pids cgroup can hold it,
    None (unlimited, and recorded so) when this process cannot make one."""
    if wanted is None or not _can_count_processes():
        return None
    return wanted
