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


WORKERS_PER_CORE = 2
"""Worker processes per core by default. A worker's threads mostly wait (for the model, a
sandboxed command, an fsync), but they share one GIL: with a worker per core, its requests and
steps queue behind each other's GIL hand-offs while the cores idle (~40% idle at 200 running
conversations on 2 cores); two per core keep the cores busy (`bench/README.md`)."""
MIB_PER_WORKER = 256
"""Memory one worker may take (its interpreter and imports, ~100 MiB at 100 running
conversations, with room to spare): the default never plans more workers than fit."""


def _cores() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def _available_mib() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass  # not Linux, or unreadable: the other bounds decide
    return None


def default_workers() -> int:
    """``--workers`` by default: ``WORKERS_PER_CORE`` per core, fewer when the available memory
    holds fewer of ``MIB_PER_WORKER`` (never below 1)."""
    bounds = [WORKERS_PER_CORE * _cores()]
    available = _available_mib()
    if available is not None:
        bounds.append(available // MIB_PER_WORKER)
    return max(1, min(bounds))


SESSIONS_PER_WORKER = 13
"""PostgreSQL sessions one worker may hold: its store's pool (8), its leases' (4) and one to
spare (a subscription holds one more while a stream is followed)."""


def workers_for_sessions(requested: int | None, free: int | None) -> tuple[int, str | None]:
    """The worker count for a PostgreSQL store with ``free`` sessions left on its server, and
    what to tell the operator: by default no more workers than those sessions hold (each its
    ``SESSIONS_PER_WORKER``; never below 1), and a warning when ``requested`` (``--workers``)
    or even one worker may not fit. ``free`` None (not asked): the count as it would be."""
    wanted = requested or default_workers()
    if free is None:
        return wanted, None
    fit = free // SESSIONS_PER_WORKER
    if wanted <= fit:
        return wanted, None
    advice = "raise the server's max_connections, or close other clients"
    if requested is not None:
        return wanted, (
            f"--workers {requested} may need {requested * SESSIONS_PER_WORKER} PostgreSQL "
            f'sessions and the database has {free} left: runs may fail with "too many '
            f'clients"; pass --workers {max(1, fit)} or {advice}'
        )
    chosen = max(1, fit)
    return chosen, (
        f"{chosen} worker(s), not {wanted}: the database has {free} PostgreSQL sessions left "
        f"and a worker may hold {SESSIONS_PER_WORKER}; {advice} for more"
    )


def default_max_running() -> int:
    """What this machine can hold at once: ``RUNNING_PER_CORE`` per core, fewer when the file
    descriptors or the available memory would run out first (never below 8)."""
    bounds = [RUNNING_PER_CORE * _cores()]
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        bounds.append((soft - 256) // FDS_PER_RUNNING)
    available = _available_mib()
    if available is not None:
        bounds.append(available // MIB_PER_RUNNING)
    return max(8, min(bounds))


MAX_RUNNING = default_max_running()
"""Conversations the server runs at once over all its workers (a thread and a shell each), 429
with Retry-After past it: sized to this machine when the module loads. ``--max-running``."""
