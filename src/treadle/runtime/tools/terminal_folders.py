"""A terminal's private folder in TMPDIR (``treadle-terminal-*``), who owns it, and the sweep that
removes what a killed process left behind.

The folder holds the FIFO the shell reads each command from (the text passes through the kernel's
pipe, never a file, so nothing of a command stays on disk), the name of the shell's pids cgroup,
and a lock file its owner keeps locked (``flock``) for as long as the shell lives. The kernel
drops that lock when the owner dies, however it dies, so ``sweep`` (run by every process that
opens a store: the CLI's commands, ``treadle serve``) knows a leftover from a live terminal of
another process: it removes only folders whose lock it can take, with the cgroup they name.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from treadle.runtime.workspace.shell import CGROUP_PIDS_ROOT, PidsCgroup

CGROUP_ROOTS = (CGROUP_PIDS_ROOT, CGROUP_PIDS_ROOT.parent / "memory")
"""The cgroup v1 hierarchies a sandbox's cgroups are made in (pids, and memory beside it)."""
CGROUP_KILL_S = 5.0
"""How long a sweep keeps killing what is left in a dead terminal's cgroup before giving up."""

logger = logging.getLogger(__name__)

PREFIX = "treadle-terminal-"
LOCK_NAME = "owner.lock"
COMMAND_FIFO = "command.fifo"
CGROUP_NAME = "cgroup"
UNLOCKED_GRACE_S = 600.0
"""A folder without a lock file (its maker was killed between mkdtemp and locking) is a
leftover only once this old: before that, it may be one being made right now."""


@dataclass
class TerminalFolder:
    """A live terminal's folder, locked by this process until ``remove``."""

    path: Path
    lock_fd: int

    @classmethod
    def create(cls, parent: Path | None = None) -> TerminalFolder:
        """A new folder in ``parent`` (default: TMPDIR), locked."""
        path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
        try:
            fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.mkfifo(path / COMMAND_FIFO, 0o600)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        return cls(path, fd)

    @property
    def fifo(self) -> Path:
        return self.path / COMMAND_FIFO

    def record_cgroup(self, cgroup: PidsCgroup | None) -> None:
        """Name the shell's cgroups (one a line), so that a sweep after a kill removes them."""
        if cgroup is None:
            return
        paths = [cgroup.path, getattr(cgroup, "memory", None)]  # a memory cgroup beside it
        text = "".join(f"{path}\n" for path in paths if isinstance(path, Path))
        (self.path / CGROUP_NAME).write_text(text)

    def follow_owner(self) -> None:
        """Give the FIFO to whoever the folder belongs to now: a sandbox running as another
        user gets the folder, and its shell must be able to open the FIFO in it."""
        folder = os.stat(self.path)
        fifo = os.stat(self.fifo, follow_symlinks=False)
        if (fifo.st_uid, fifo.st_gid) != (folder.st_uid, folder.st_gid):
            os.chown(self.fifo, folder.st_uid, folder.st_gid, follow_symlinks=False)

    def remove(self) -> None:
        """Delete the folder, then let go of its lock (in this order: a sweep never sees it
        unlocked while it still holds anything)."""
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


@dataclass(frozen=True)
class Swept:
    folders: int
    cgroups: int


def sweep(temp_root: Path | None = None, cgroup_roots: Sequence[Path] = CGROUP_ROOTS) -> Swept:
    """Remove the terminal folders (and their cgroups) whose owner process is dead."""
    root = Path(temp_root) if temp_root is not None else Path(tempfile.gettempdir())
    folders = cgroups = 0
    try:
        candidates = sorted(root.glob(PREFIX + "*"))
    except OSError:
        return Swept(0, 0)
    for folder in candidates:
        removed, cgroup = _sweep_one(folder, cgroup_roots)
        folders += removed
        cgroups += cgroup
    return Swept(folders, cgroups)


def sweep_quietly() -> None:
    """``sweep``, for a process opening a store: a failure is logged, never in the way."""
    try:
        sweep()
    except Exception:  # a sweep must never stop the command that opens the store
        logger.warning("removing terminal folders left by killed runs failed", exc_info=True)


def _sweep_one(folder: Path, cgroup_roots: Sequence[Path]) -> tuple[int, int]:
    try:
        info = folder.lstat()
    except OSError:
        return 0, 0
    if not stat.S_ISDIR(info.st_mode):
        return 0, 0
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        if info.st_uid != os.geteuid() or time.time() - info.st_mtime < UNLOCKED_GRACE_S:
            return 0, 0  # another user's, or being made now perhaps
        shutil.rmtree(folder, ignore_errors=True)
        return int(not folder.exists()), 0
    except OSError:
        return 0, 0
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            return 0, 0  # another user's terminal (the lock file stays its maker's)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0, 0  # its owner lives
        removed = sum(_remove_cgroup(path) for path in _recorded_cgroups(folder, cgroup_roots))
        shutil.rmtree(folder, ignore_errors=True)
        return 1, removed
    finally:
        os.close(fd)


def _recorded_cgroups(folder: Path, cgroup_roots: Sequence[Path]) -> list[Path]:
    """The cgroups a folder names, only those of Treadle's under ``cgroup_roots`` (the file
    is ours, but a sweep never removes anything else on its word)."""
    try:
        lines = (folder / CGROUP_NAME).read_text().split("\n")
    except OSError:
        return []
    named = [Path(line.strip()) for line in lines if line.strip()]
    return [
        path for path in named if path.parent in cgroup_roots and path.name.startswith("treadle-")
    ]


def _remove_cgroup(path: Path) -> int:
    """SIGKILL what is left in a dead terminal's cgroup, then remove it: 1 when it is gone."""
    deadline = time.monotonic() + CGROUP_KILL_S
    while True:
        try:
            pids = [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return 0  # already gone
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            path.rmdir()
            return 1
        except FileNotFoundError:
            return 0
        except OSError:
            if time.monotonic() >= deadline:
                return 0
            time.sleep(0.02)
