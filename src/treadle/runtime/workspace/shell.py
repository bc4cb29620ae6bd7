"""How a workspace starts its shell: the command line, the environment, and what contains it.

A workspace hands the terminal a ``ShellCommand``; the terminal starts it on its pseudo-terminal
through a small launcher (``LAUNCHER``) that, between fork and exec, takes the terminal, joins the
pids cgroup and sets the resource limits, so every process of the shell inherits them.
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

# Runs in the child between fork and exec (Popen has no option to take a controlling terminal,
# and preexec_fn is unsafe with threads): take the pty, join the cgroup, set the limits, exec.
LAUNCHER = (
    "import fcntl, json, os, resource, signal, sys, termios\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    # Python ignores these; ignored signals survive exec, and a shell needs them (`yes | head`
    # ends on SIGPIPE, a write past the file-size limit on SIGXFSZ).
    "for name in ('SIGPIPE', 'SIGXFSZ'):\n"
    "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
    "setup = json.loads(sys.argv[1])\n"
    "if setup['cgroup_procs']:\n"
    "    with open(setup['cgroup_procs'], 'w') as procs:\n"
    "        procs.write(str(os.getpid()))\n"
    "for name, value in setup['rlimits'].items():\n"
    "    resource.setrlimit(getattr(resource, name), (value, value))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


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
