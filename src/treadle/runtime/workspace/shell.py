"""How a workspace starts its shell: the command line, the environment, and what contains it.

A workspace hands the terminal a ``ShellCommand``; the terminal starts it on its pseudo-terminal
with ``launch_argv``, which joins the pids cgroup, sets the resource limits and takes the terminal
before the shell (or its sandbox) starts, so every process of the shell inherits them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""PATH of a shell nobody gave one (a sandbox's, or a caller's that passed no environment)."""

SHELL_ENV_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME")
"""What an unsandboxed shell takes from the environment its caller read (at the edge): never a
key; anything else a tool needs is passed explicitly (secrets exported by the user)."""

SETSID = "/usr/bin/setsid"
PRLIMIT = "/usr/bin/prlimit"
"""util-linux's: a new session with the pty as controlling terminal, and resource limits, each
set in the same process before it becomes the shell (exec, no fork: no Python start per shell)."""

_JOIN_CGROUP = 'echo $$ > "$0" && exec "$@"'
"""``sh -c`` script: move this process into the cgroup (``$0``), then become the rest."""

PRLIMIT_OPTIONS = {"RLIMIT_AS": "--as", "RLIMIT_FSIZE": "--fsize", "RLIMIT_CPU": "--cpu"}


def launch_argv(shell: ShellCommand, *, controlling_terminal: bool = True) -> list[str]:
    """The command line that starts ``shell`` on a pty given as stdin: joins its cgroup, sets
    its limits and takes the pty as controlling terminal (for job control), each by exec, so
    that every process of the shell inherits all three. The caller must not start a new session
    itself (setsid would then fork). Without ``controlling_terminal`` (a command without a pty,
    e.g. a hook) the caller starts the new session itself."""
    argv: list[str] = []
    if shell.cgroup is not None:
        argv += ["/bin/sh", "-c", _JOIN_CGROUP, str(shell.cgroup.procs)]
    if shell.rlimits:
        argv.append(PRLIMIT)
        argv += [f"{PRLIMIT_OPTIONS[name]}={value}" for name, value in shell.rlimits.items()]
        argv.append("--")
    if not controlling_terminal:
        return [*argv, *shell.argv]
    return [*argv, SETSID, "--ctty", *shell.argv]


@dataclass(frozen=True)
class ShellCommand:
    """A shell to start: ``argv`` (the shell's own command line, maybe behind a sandbox's),
    its whole environment, where the terminal's private folder is seen from inside, the
    resource limits and the cgroup every process of it joins."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    private_dir_inside: Path
    rlimits: Mapping[str, int] = field(default_factory=dict)
    cgroup: PidsCgroup | None = None
    sandboxed: bool = False


CGROUP_PIDS_ROOT = Path("/sys/fs/cgroup/pids")
"""Where a cgroup v1 pids hierarchy is mounted (as on Debian hosts and their containers)."""


class PidsCgroup:
    """A pids cgroup (v1) of its own for one shell: ``pids.max`` caps how many processes it
    and its descendants may have (RLIMIT_NPROC does not bind root); ``kill`` ends every one."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, maximum: int, root: Path = CGROUP_PIDS_ROOT) -> PidsCgroup | None:
        """A new cgroup allowing ``maximum`` processes; None when this process cannot make
        one (not root, no pids hierarchy, read-only)."""
        if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
            return None
        path = root / f"treadle-{uuid.uuid4().hex[:16]}"
        try:
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(maximum))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

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
        # rmdir fails while a process still belongs to it (e.g. a zombie not yet reaped).
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.02)

    def __repr__(self) -> str:
        return f"PidsCgroup({str(self.path)!r})"


def unsandboxed_environment(environment: Mapping[str, str] | None) -> dict[str, str]:
    """The environment of an unsandboxed shell: the ``SHELL_ENV_NAMES`` the caller read at
    its edge (default: a PATH only)."""
    if environment is None:
        return {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    return {name: environment[name] for name in SHELL_ENV_NAMES if name in environment}
