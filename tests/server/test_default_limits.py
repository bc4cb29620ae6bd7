"""The defaults sized to the machine: ``--max-running`` 100 per core, fewer when the file
descriptors or the available memory would run out first, never below 8; ``--workers`` two per
core, fewer when memory is short, never below 1."""

from __future__ import annotations

import resource

import pytest

from treadle.server import limits


def test_the_default_is_100_per_core_here_within_the_fd_and_memory_bounds() -> None:
    cores = len(limits.os.sched_getaffinity(0))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = min(100 * cores, (soft - 256) // limits.FDS_PER_RUNNING)
    assert limits.default_max_running() <= expected
    assert limits.default_max_running() >= 8


def test_few_file_descriptors_bound_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits.resource, "getrlimit", lambda _which: (1024, 1024))
    assert limits.default_max_running() == (1024 - 256) // limits.FDS_PER_RUNNING  # 64


def test_a_tiny_machine_still_runs_eight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits.resource, "getrlimit", lambda _which: (300, 300))
    assert limits.default_max_running() == 8


def test_the_default_workers_are_two_per_core_within_the_memory_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cores = len(limits.os.sched_getaffinity(0))
    available = limits._available_mib()
    assert available is not None  # Linux
    # Read once: MemAvailable moves between two reads, and the bound with it.
    monkeypatch.setattr(limits, "_available_mib", lambda: available)
    workers = limits.default_workers()
    assert 1 <= workers <= 2 * cores
    assert workers == min(2 * cores, available // limits.MIB_PER_WORKER)


def test_short_memory_means_fewer_workers_but_one_at_least(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "_available_mib", lambda: 3 * limits.MIB_PER_WORKER + 1)
    monkeypatch.setattr(limits, "_cores", lambda: 8)
    assert limits.default_workers() == 3
    monkeypatch.setattr(limits, "_available_mib", lambda: 10)
    assert limits.default_workers() == 1
    monkeypatch.setattr(limits, "_available_mib", lambda: None)  # unknown: the cores decide
    assert limits.default_workers() == 16
