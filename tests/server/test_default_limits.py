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


def test_workers_on_postgresql_fit_the_sessions_it_has_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "default_workers", lambda: 64)  # a big machine's default
    per = limits.SESSIONS_PER_WORKER
    assert limits.workers_for_sessions(None, None) == (64, None)  # not asked: as it would be
    assert limits.workers_for_sessions(None, 64 * per) == (64, None)
    count, warning = limits.workers_for_sessions(None, 7 * per + 3)
    assert count == 7
    assert warning is not None
    assert "not 64" in warning
    assert "max_connections" in warning
    count, warning = limits.workers_for_sessions(None, 2)  # none fits: one, said so
    assert count == 1
    assert warning is not None
    # asked for: kept, with the risk named and a count that fits
    count, warning = limits.workers_for_sessions(10, 4 * per)
    assert count == 10
    assert warning is not None
    assert "--workers 4" in warning
    assert "too many clients" in warning
    assert limits.workers_for_sessions(3, 4 * per) == (3, None)


@pytest.mark.postgres
def test_the_sessions_left_are_read_from_the_database() -> None:
    import psycopg

    from support.postgres import POSTGRES_BASE_URL
    from treadle.store.postgres_sessions import free_sessions

    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        most = int(conn.execute("SHOW max_connections").fetchone()[0])
        before = free_sessions(POSTGRES_BASE_URL)
        assert before is not None
        assert 0 <= before < most  # this session at least is open
    assert free_sessions("postgresql://127.0.0.1:1/nowhere") is None  # not reachable
