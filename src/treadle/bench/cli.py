"""``treadle bench cli``: how long the command line takes to start, each command a new process.

Every command runs ``repeats`` times (rounds interleaved, so a busy moment of the shared machine
falls on all of them alike) and the median wall time is kept, beside the median of
``python -c 'import typer, rich.console, pydantic'`` in the same run: the floor any typer CLI
with pydantic pays. The ratios are what to compare across runs (the floors: help and
``--version`` within 2x of it, ``log`` and ``conversations`` on a small store within 4x).

Each command's wall time and its CPU time (user + system of the child) are both kept; the
limits are judged on CPU time, which a machine shared with other work changes least.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BASELINE = "import typer, rich.console, pydantic"
HELP_LIMIT = 2.0
READ_LIMIT = 4.0
"""The ratios with floors (help and version; a reading command on a small store)."""


def _small_store(folder: Path, conversations: int, events: int) -> tuple[str, str]:
    """A SQLite store of ``conversations`` conversations of ``events`` events; its URL and
    the id of one conversation."""
    from treadle.bench.workload import realistic_events
    from treadle.store.urls import open_store

    url = f"sqlite:///{folder / 'bench-cli.db'}"
    store = open_store(url)
    try:
        first = ""
        for number in range(conversations):
            info = store.create_conversation(None, title=f"bench conversation {number}")
            path = realistic_events(events, seed=number)
            store.append_batch(info.id, path)
            store.set_head(info.id, path[-1].id)
            first = first or info.id
    finally:
        store.close()
    return url, first


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``argv``."""
    start, cpu = time.perf_counter(), _cpu()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed, spent = time.perf_counter() - start, _cpu() - cpu
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode(errors='replace')}"
        )
    return elapsed, spent


def run_cli_bench(
    repeats: int = 5,
    conversations: int = 3,
    events: int = 200,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Median start-up seconds of each command and its ratio to the import floor.
    ``python``/``env``: the interpreter and environment the commands run with (default: this
    one), so that another checkout's code can be measured the same way."""
    environment = dict(os.environ if env is None else env)
    environment.setdefault("COLUMNS", "80")
    with tempfile.TemporaryDirectory(prefix="treadle-bench-cli-") as folder:
        url, conversation = _small_store(Path(folder), conversations, events)
        treadle = [python, "-m", "treadle"]
        commands: dict[str, list[str]] = {
            "import_floor": [python, "-c", BASELINE],
            "help": [*treadle, "--help"],
            "version": [*treadle, "--version"],
            "run_help": [*treadle, "run", "--help"],
            "log": [*treadle, "log", conversation, "--store", url],
            "conversations": [*treadle, "conversations", "--store", url],
        }
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(repeats):
            for name, argv in commands.items():
                wall, cpu = _time_once(argv, environment)
                walls[name].append(wall)
                cpus[name].append(cpu)
    wall_medians = {name: statistics.median(values) for name, values in walls.items()}
    cpu_medians = {name: statistics.median(values) for name, values in cpus.items()}
    figures: dict[str, Any] = {"repeats": repeats, "store_events": conversations * events}
    for suffix, medians in (("s", wall_medians), ("cpu_s", cpu_medians)):
        floor = medians["import_floor"]
        for name, median in medians.items():
            figures[f"{name}_{suffix}"] = round(median, 4)
        for name, median in medians.items():
            if name != "import_floor":
                ratio = "vs_import" if suffix == "s" else "cpu_vs_import"
                figures[f"{name}_{ratio}"] = round(median / floor, 2)
    floor = cpu_medians["import_floor"]
    help_names = ("help", "version", "run_help")
    figures["help_within_limit"] = all(cpu_medians[n] <= HELP_LIMIT * floor for n in help_names)
    figures["read_within_limit"] = all(
        cpu_medians[n] <= READ_LIMIT * floor for n in ("log", "conversations")
    )
    return figures
