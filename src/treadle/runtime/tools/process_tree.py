"""The processes a command started, found in ``/proc`` and killed: what an interrupt stops.

A command run by a shell is every process that descends from the shell (by parent) or sits in
its session, and that started at or after the command's start. That covers its foreground
pipeline, the background jobs it started with ``&`` (their own process groups under job
control), and orphans reparented away from the shell that stay in its session; it leaves the
shell itself and the background jobs of earlier commands (a server started before) alone.

"Started at or after" is exact: start times have the kernel's clock-tick resolution (10 ms), so
within the tick of the command's start the order pids were handed out in decides (a ``Mark`` is
both). Limits: a process that both left the session (``setsid``) and was reparented away (a
double-forked daemon) is not found: a sandbox's pid namespace is what contains those.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 4_194_304  # Linux's largest


_PID_MAX = _pid_max()


@dataclass(frozen=True, slots=True)
class Mark:
    """A point in the order processes were created in: the clock tick since boot that
    ``/proc/<pid>/stat`` gives start times in, and the last pid handed out (None: unknown)."""

    tick: int
    last_pid: int | None

    def precedes(self, pid: int, start_tick: int) -> bool:
        """Whether a process with this pid and start tick was created after the mark."""
        if start_tick != self.tick:
            return start_tick > self.tick
        if self.last_pid is None:
            return True  # same tick, order unknown: counted as the command's
        # Pids are handed out in increasing order, wrapping at pid_max.
        return 0 < (pid - self.last_pid) % _PID_MAX < _PID_MAX // 2


def mark() -> Mark:
    """Now, as a ``Mark`` (a clock read and a small file read: cheap enough per command)."""
    tick = int(time.clock_gettime(time.CLOCK_BOOTTIME) * _TICKS_PER_S)
    try:
        last_pid: int | None = int(_LAST_PID.read_bytes())
    except (OSError, ValueError):
        last_pid = None
    return Mark(tick, last_pid)


@dataclass(frozen=True, slots=True)
class _Process:
    pid: int
    ppid: int
    session: int
    start_tick: int


def _processes() -> list[_Process]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # ended meanwhile
            continue
        # The command name (field 2) may hold spaces and parentheses: split after the last ")".
        fields = stat[stat.rfind(b")") + 2 :].split()
        try:
            found.append(_Process(int(name), int(fields[1]), int(fields[3]), int(fields[19])))
        except (IndexError, ValueError):
            continue
    return found


def started_since(roots: Iterable[int], since: Mark) -> list[int]:
    """The pids that descend from one of ``roots`` or share a session led by one of them, and
    were created after ``since``; never the roots themselves."""
    root_set = set(roots)
    processes = _processes()
    children: dict[int, list[_Process]] = {}
    for process in processes:
        children.setdefault(process.ppid, []).append(process)
    tree: set[int] = set()
    stack = list(root_set)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child.pid not in tree:
                tree.add(child.pid)
                stack.append(child.pid)
    return [
        process.pid
        for process in processes
        if process.pid not in root_set
        and since.precedes(process.pid, process.start_tick)
        and (process.pid in tree or process.session in root_set)
    ]


def children_started_since(parent: int, since: Mark) -> list[int]:
    """The pids whose parent is ``parent`` and that were created after ``since``, zombies
    included: the ones ``parent`` has not reaped yet."""
    return [
        process.pid
        for process in _processes()
        if process.ppid == parent and since.precedes(process.pid, process.start_tick)
    ]


def kill_started_since(roots: Iterable[int], since: Mark) -> list[int]:
    """SIGKILL what ``started_since`` finds; returns the pids signalled. A process may fork
    between the look and the kill: callers repeat until nothing is found."""
    pids = started_since(roots, since)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids
