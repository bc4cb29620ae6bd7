"""A workspace whose tools run inside a bubblewrap sandbox (``SandboxedWorkspace``).

Inside: the workspace read-write at its own path; the system read-only (/usr, /bin, /lib*, the
parts of /etc a shell and common tools read); a private empty HOME and /tmp; a process namespace
of its own (``/proc`` shows only the sandbox); no network unless the settings turn it on (then
the host's network, its services on 127.0.0.1 included); every capability dropped; a clean
environment (PATH, HOME, LANG, TERM and the secrets the user exports). Resource limits are set
on the shell before bubblewrap starts, so every process inherits them; the number of processes is
capped by a pids cgroup of its own when this process may make one (as root on a cgroup v1
host), else it is recorded as unlimited.

Lifetime: bubblewrap runs with ``--die-with-parent`` and the shell is the process namespace's
only command, so when the conversation closes its terminal (or the process running it dies) the
shell exits and every process of the sandbox, background jobs included, is killed with it; the
cgroup is then emptied and removed.

File tools do not run inside the sandbox: they act from this process through ``resolve``, which
keeps every path (symlinks resolved) inside the workspace, as for a local workspace.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from treadle.api.settings import SandboxLimits, SandboxSettings
from treadle.runtime.workspace.base import SandboxUnavailable, WorkspaceError
from treadle.runtime.workspace.local import LocalWorkspace
from treadle.runtime.workspace.shell import DEFAULT_PATH, PidsCgroup, ShellCommand

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
    ) -> None:
        if sandbox.kind != "bubblewrap":
            raise WorkspaceError(f"a sandboxed workspace needs kind bubblewrap, not {sandbox.kind}")
        super().__init__(root, state_dir=state_dir, create=create, within=within)
        self._sandbox = sandbox
        self._bwrap = bwrap
        self._lang = (environment or {}).get("LANG") or "C.UTF-8"
        for mount in sandbox.mounts_ro:
            if not Path(mount).exists():
                raise WorkspaceError(f"--mount-ro {mount}: no such path on this machine")
        check_bubblewrap(bwrap)
        # Whether processes can be counted is known once per process (see processes_limit).
        self._processes = processes_limit(sandbox.limits.processes)

    @property
    def sandbox(self) -> SandboxSettings:
        return self._sandbox

    @property
    def isolation(self) -> dict[str, Any]:
        limits = self._sandbox.limits.model_dump()
        limits["processes"] = self._processes
        return {
            "sandbox": "bubblewrap",
            "network": self._sandbox.network,
            "mounts_ro": list(self._sandbox.mounts_ro),
            "limits": limits,
        }

    def shell_command(self, shell_argv: list[str], private_dir: Path) -> ShellCommand:
        cgroup = PidsCgroup.create(self._processes) if self._processes is not None else None
        if self._processes is not None and cgroup is None:
            raise SandboxUnavailable(
                f"the pids cgroup that caps the sandbox at {self._processes} processes could "
                "not be made now; free cgroups or run with limits.processes null"
            )
        rlimits = sandbox_rlimits(self._sandbox.limits)
        env = {"PATH": DEFAULT_PATH, "HOME": SANDBOX_HOME, "LANG": self._lang, "TERM": "dumb"}
        return ShellCommand(
            argv=(*self._bwrap_argv(private_dir), *shell_argv),
            env=env,
            private_dir_inside=Path(PRIVATE_DIR_INSIDE),
            rlimits=rlimits,
            cgroup=cgroup,
            sandboxed=True,
        )

    def _bwrap_argv(self, private_dir: Path) -> list[str]:
        root = str(self.root)
        argv = [self._bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
        argv += ["--unshare-uts", "--hostname", "sandbox", "--unshare-cgroup-try"]
        if self._sandbox.network == "off":
            argv.append("--unshare-net")
        # Root outside would keep every capability inside (mount, mknod): drop them all.
        argv += ["--cap-drop", "ALL"]
        argv += system_mounts()
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        argv += ["--tmpfs", SANDBOX_HOME, "--ro-bind", str(private_dir), PRIVATE_DIR_INSIDE]
        for mount in self._sandbox.mounts_ro:
            argv += ["--ro-bind", mount, mount]
        argv += ["--bind", root, root, "--chdir", root, "--"]
        return argv

    def __repr__(self) -> str:
        return f"SandboxedWorkspace({str(self.root)!r}, network={self._sandbox.network})"


def sandbox_rlimits(limits: SandboxLimits) -> dict[str, int]:
    """The per-process resource limits of a sandbox (``RLIMITS``), by resource name."""
    return {
        RLIMITS[name][0]: value * RLIMITS[name][1]
        for name, value in limits.model_dump().items()
        if name in RLIMITS and value is not None
    }


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


@functools.cache
def _bubblewrap_problem(bwrap: str) -> str | None:
    """Why bubblewrap cannot start a sandbox here (None: it can), tried once per process."""
    if not Path(bwrap).exists():
        return (
            f"bubblewrap is not installed ({bwrap} is missing): install it (Debian/Ubuntu: "
            "apt-get install bubblewrap)"
        )
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-net", "--cap-drop", "ALL"]
    argv += [*system_mounts(), "--proc", "/proc", "--dev", "/dev", "--", "/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap could not run: {error}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
        return (
            f"bubblewrap cannot make a sandbox here ({said}); it needs unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu an AppArmor "
            "profile for bwrap) or to run as root"
        )
    return None


def check_bubblewrap(bwrap: str = BWRAP) -> None:
    """``SandboxUnavailable`` naming why bubblewrap cannot run here and how to fix it."""
    problem = _bubblewrap_problem(bwrap)
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


def processes_limit(wanted: int | None) -> int | None:
    """The process limit the sandbox really gets: ``wanted`` when a pids cgroup can hold it,
    None (unlimited, and recorded so) when this process cannot make one."""
    if wanted is None or not _can_count_processes():
        return None
    return wanted
