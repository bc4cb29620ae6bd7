"""How a workspace starts its shell: the command line, the environment, and what contains it.

A workspace hands the terminal a ``ShellCommand``; the terminal starts it on its pseudo-terminal
with ``launch_argv``, which joins the cgroups (pids, memory), opens the descriptors bubblewrap
reads (its seccomp filter), sets the resource limits, becomes the sandbox's user and takes the
terminal before the shell (or its sandbox) starts, so every process of the shell inherits them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from treadle.runtime.workspace.sandbox_user import SandboxUser

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""PATH of a shell nobody gave one (a sandbox's, or a caller's that passed no environment)."""

SHELL_ENV_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME")
"""What an unsandboxed shell takes from the environment its caller read (at the edge): never a
key; anything else a tool needs is passed explicitly (secrets exported by the user)."""

SETSID = "/usr/bin/setsid"
PRLIMIT = "/usr/bin/prlimit"
SETPRIV = "/usr/bin/setpriv"
"""util-linux's: a new session with the pty as controlling terminal, resource limits and another
user, each set in the same process before it becomes the shell (exec, no fork: no Python start
per shell)."""

PRLIMIT_OPTIONS = {"RLIMIT_AS": "--as", "RLIMIT_FSIZE": "--fsize", "RLIMIT_CPU": "--cpu"}


def launch_argv(shell: ShellCommand, *, controlling_terminal: bool = True) -> list[str]:
    """The command line that starts ``shell`` on a pty given as stdin: joins its cgroups,
    opens the files it is given as descriptors, sets its limits and takes the pty as controlling terminal (for job control), each by exec, so
    that every process of the shell inherits all three. The caller must not start a new session
    itself (setsid would then fork). Without ``controlling_terminal`` (a command without a pty,
    e.g. a hook) the caller starts the new session itself."""
    argv: list[str] = []
    steps = [f"echo $$ > {shlex.quote(str(procs))}" for procs in shell.cgroup_procs()]
    if steps or shell.files:
        # sh: join the cgroups (``$$`` is this process: it stays the same through exec), then
        # become the rest with the descriptors it needs (bubblewrap's seccomp filter) open.
        opened = "".join(f" {fd}<{shlex.quote(str(path))}" for fd, path in shell.files)
        argv += ["/bin/sh", "-c", " && ".join([*steps, f'exec "$@"{opened}']), "sh"]
    if shell.rlimits:
        argv.append(PRLIMIT)
        argv += [f"{PRLIMIT_OPTIONS[name]}={value}" for name, value in shell.rlimits.items()]
        argv.append("--")
    if shell.user is not None:  # last as root: the cgroups are joined and the files open
        argv += [SETPRIV, f"--reuid={shell.user.uid}", f"--regid={shell.user.gid}"]
        argv += ["--clear-groups", "--"]
    if not controlling_terminal:
        return [*argv, *shell.argv]
    return [*argv, SETSID, "--ctty", *shell.argv]


@dataclass(frozen=True)
class ShellCommand:
    """A shell to start: ``argv`` (the shell's own command line, maybe behind a sandbox's),
    its whole environment, where the terminal's private folder is seen from inside, the
    resource limits, the cgroup every process of it joins, and the files opened read-only as
    given descriptors before it starts (``(fd, path)``: bubblewrap's ``--seccomp FD``)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    private_dir_inside: Path
    rlimits: Mapping[str, int] = field(default_factory=dict)
    cgroup: PidsCgroup | None = None
    sandboxed: bool = False
    files: tuple[tuple[int, Path], ...] = ()
    user: SandboxUser | None = None
    """Another host user to run as (a root process starting a sandbox for someone else)."""

    def cgroup_procs(self) -> list[Path]:
        return [] if self.cgroup is None else self.cgroup.procs_files()


CGROUP_PIDS_ROOT = Path("/sys/fs/cgroup/pids")
"""Where a cgroup v1 pids hierarchy is mounted (as on Debian hosts and their containers)."""
CGROUP_MEMORY_ROOT = Path("/sys/fs/cgroup/memory")
"""Where a cgroup v1 memory hierarchy is mounted."""


class PidsCgroup:
    """A pids cgroup (v1) of its own for one shell: ``pids.max`` caps how many processes it
    and its descendants may have (RLIMIT_NPROC does not bind root); ``kill`` ends every one.
    With ``memory``, a memory cgroup of the same name beside it holds the memory of all of
    them as one total, tmpfs pages (the sandbox's /tmp, HOME, /dev/shm) included, which a
    per-process address-space limit never counts."""

    def __init__(self, path: Path, memory: Path | None = None) -> None:
        self.path = path
        sibling = CGROUP_MEMORY_ROOT / path.name
        if memory is None and path.parent == CGROUP_PIDS_ROOT and sibling.is_dir():
            memory = sibling  # rebuilt from its path (an MCP server's spec keeps only that)
        self.memory = memory

    @classmethod
    def create(
        cls,
        maximum: int,
        root: Path = CGROUP_PIDS_ROOT,
        *,
        memory_bytes: int | None = None,
        memory_root: Path = CGROUP_MEMORY_ROOT,
    ) -> PidsCgroup | None:
        """A new cgroup allowing ``maximum`` processes, and with ``memory_bytes`` a memory
        cgroup holding them to that many bytes; None when this process cannot make them
        (not root, no such hierarchy, read-only)."""
        name = f"treadle-{uuid.uuid4().hex[:16]}"
        path = _make_cgroup(root, name, {"pids.max": str(maximum)})
        if path is None:
            return None
        memory = None
        if memory_bytes is not None:
            limits = {"memory.limit_in_bytes": str(memory_bytes)}
            if (memory_root / "memory.memsw.limit_in_bytes").exists():
                limits["memory.memsw.limit_in_bytes"] = str(memory_bytes)  # swap counts too
            memory = _make_cgroup(memory_root, name, limits)
            if memory is None:
                with contextlib.suppress(OSError):
                    path.rmdir()
                return None
        return cls(path, memory)

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def procs_files(self) -> list[Path]:
        """The files a process writes its pid to, to join every cgroup of this one."""
        return [self.procs] + ([self.memory / "cgroup.procs"] if self.memory else [])

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in the cgroup until none is left (new forks included),
        then remove it. The pids limit bounds how many a fork bomb can make meanwhile."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        for path in [self.path] + ([self.memory] if self.memory else []):
            _remove_cgroup(path, deadline)

    def __repr__(self) -> str:
        return f"PidsCgroup({str(self.path)!r})"


def _make_cgroup(root: Path, name: str, settings: Mapping[str, str]) -> Path | None:
    """A new cgroup ``name`` under ``root`` with ``settings`` written; None (nothing left)
    when one cannot be made or set."""
    if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
        return None
    path = root / name
    try:
        path.mkdir()
    except OSError:
        return None
    try:
        for key, value in settings.items():
            (path / key).write_text(value)
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return None
    return path


def _remove_cgroup(path: Path, deadline: float) -> None:
    # rmdir fails while a process still belongs to it (e.g. a zombie not yet reaped).
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)


def unsandboxed_environment(environment: Mapping[str, str] | None) -> dict[str, str]:
    """The environment of an unsandboxed shell: the ``SHELL_ENV_NAMES`` the caller read at
    its edge (default: a PATH only)."""
    if environment is None:
        return {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    return {name: environment[name] for name in SHELL_ENV_NAMES if name in environment}
