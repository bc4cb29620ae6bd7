"""Default bounds of one server (the ``treadle serve`` flags that change them): a module of the
standard library only, so the CLI can show them without loading the server."""

import os
import resource

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body, counted as it arrives (chunked bodies too): ``--max-body-bytes``."""
RUNNING_PER_CORE = 100
"""Conversations held running per core by default: a run mostly waits for its model (a step's
own CPU is ~15-20 ms against seconds of a hosted model's answer), so a core holds many."""
FDS_PER_RUNNING = 12
"""File descriptors one running conversation holds in the server (its shell's pipes, its store
connections, its model client's sockets), with room to spare."""
MIB_PER_RUNNING = 24
"""Memory one running conversation takes (its sandboxed shell's processes, the server's share)."""


def default_max_running() -> int:
    """What this machine can hold at once: ``RUNNING_PER_CORE`` per core, fewer when the file
    descriptors or the available memory would run out first (never below 8)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    bounds = [RUNNING_PER_CORE * (cores or 1)]
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        bounds.append((soft - 256) // FDS_PER_RUNNING)
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    bounds.append(int(line.split()[1]) // 1024 // MIB_PER_RUNNING)
    except (OSError, ValueError, IndexError):
        pass  # not Linux, or unreadable: the other bounds decide
    return max(8, min(bounds))


MAX_RUNNING = default_max_running()
"""Conversations the server runs at once over all its workers (a thread and a shell each), 429
with Retry-After past it: sized to this machine when the module loads. ``--max-running``."""
