"""The bounded pool of PostgreSQL sessions (store/postgres_sessions.Pool), on a real server: no
more than its size open however many threads ask at once, a thread already holding one never
waits for itself, a full pool waits and then says so, and what it opened is closed at the end.

Found by ``treadle bench server --store postgresql://...``: with 200 conversations on four
workers the unbounded pools opened a session per asking thread, went past the server's
``max_connections`` and three runs failed with "too many clients"."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from support.waiting import wait_until
from treadle.store.base import StoreError, StoreUnavailable
from treadle.store.postgres import PostgresEventStore, parse_postgres_url
from treadle.store.postgres_sessions import Pool, connect

pytestmark = pytest.mark.postgres


def _pool(url: str, role: str, **options) -> Pool:
    conninfo, schema, durability = parse_postgres_url(url)
    return Pool(lambda: connect(conninfo, schema, durability, role), **options)


def _sessions(url: str, role: str) -> int:
    """Sessions PostgreSQL has open for this test's ``role``."""
    conninfo, schema, _ = parse_postgres_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (f"treadle-{role}:{schema}",),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_many_threads_at_once_share_at_most_size_sessions(postgres_url):
    pool = _pool(postgres_url, "pooltest", size=3)
    most = [0]
    lock = threading.Lock()
    failures: list[BaseException] = []
    start = threading.Barrier(24)

    def borrow() -> None:
        try:
            start.wait()
            for _ in range(5):
                with pool.connection() as conn:
                    with lock:
                        most[0] = max(most[0], pool.open_connections)
                    conn.execute("SELECT pg_sleep(0.002)")
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=borrow) for _ in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert failures == []
        assert 1 <= most[0] <= 3
        assert pool.open_connections <= 3
        assert _sessions(postgres_url, "pooltest") == pool.open_connections  # kept, not churned
    finally:
        pool.close()
    assert pool.open_connections == 0
    wait_until(lambda: _sessions(postgres_url, "pooltest") == 0)  # a backend ends after its client


def test_a_thread_holding_a_session_gets_a_second_from_a_full_pool(postgres_url):
    pool = _pool(postgres_url, "pooltest", size=1, wait_s=0.5)
    try:
        with pool.connection() as outer:
            began = time.monotonic()
            with pool.connection() as inner:  # beyond the bound: it would wait for itself
                assert inner is not outer
                assert inner.execute("SELECT 1").fetchone() == (1,)
                assert pool.open_connections == 2
            assert time.monotonic() - began < 0.5
            assert pool.open_connections == 1  # the one beyond the bound is closed
        assert pool.open_connections == 1
    finally:
        pool.close()
    wait_until(lambda: _sessions(postgres_url, "pooltest") == 0)  # a backend ends after its client


def test_a_full_pool_waits_for_a_session_to_come_back(postgres_url):
    pool = _pool(postgres_url, "pooltest", size=1, wait_s=10)
    held = threading.Event()
    release = threading.Event()
    got: list[float] = []

    def holder() -> None:
        with pool.connection():
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)

        def wait_for_one() -> None:
            with pool.connection():
                got.append(time.monotonic())

        waiter = threading.Thread(target=wait_for_one)
        asked = time.monotonic()
        waiter.start()
        time.sleep(0.2)
        assert got == []  # still waiting: the one session is lent
        release.set()
        waiter.join(10)
        assert len(got) == 1
        assert got[0] - asked >= 0.2
    finally:
        release.set()
        thread.join()
        pool.close()


def test_a_pool_full_for_too_long_says_so(postgres_url):
    pool = _pool(postgres_url, "pooltest", size=1, wait_s=0.2)
    try:
        with pool.connection():
            outcome: list[BaseException] = []

            def ask() -> None:
                try:
                    with pool.connection():
                        pass
                except StoreUnavailable as error:
                    outcome.append(error)

            thread = threading.Thread(target=ask)
            thread.start()
            thread.join(10)
        assert len(outcome) == 1
        assert "all 1 PostgreSQL connections of this process's pool" in str(outcome[0])
        assert pool.open_connections == 1
    finally:
        pool.close()


def test_closing_wakes_a_waiting_thread(postgres_url):
    pool = _pool(postgres_url, "pooltest", size=1, wait_s=30)
    outcome: list[BaseException] = []
    with pool.connection():

        def ask() -> None:
            try:
                with pool.connection():
                    pass
            except StoreError as error:
                outcome.append(error)

        thread = threading.Thread(target=ask)
        thread.start()
        time.sleep(0.1)
        pool.close()
        thread.join(5)
        assert not thread.is_alive()
    assert len(outcome) == 1
    assert "closed" in str(outcome[0])
    assert pool.open_connections == 0
    wait_until(lambda: _sessions(postgres_url, "pooltest") == 0)  # a backend ends after its client


def test_a_session_that_cannot_be_made_frees_its_place(postgres_url):
    calls = [0]
    conninfo, schema, durability = parse_postgres_url(postgres_url)

    def flaky() -> psycopg.Connection:
        calls[0] += 1
        if calls[0] == 1:
            raise StoreUnavailable("the server refused this one")
        return connect(conninfo, schema, durability, "pooltest")

    pool = Pool(flaky, size=1, wait_s=0.5)
    try:
        with pytest.raises(StoreUnavailable, match="refused this one"), pool.connection():
            pass
        assert pool.open_connections == 0
        with pool.connection() as conn:  # the place is free again: no wait for a ghost
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_a_store_under_many_threads_keeps_its_sessions_bounded(postgres_url):
    """32 threads at once on one store: at most 8 sessions are ever opened, and kept (the
    unbounded pool opened one per thread, then closed all but 8 as they came back)."""
    store = PostgresEventStore(postgres_url)
    opened = [0]
    make = store._pool._connect

    def counted() -> psycopg.Connection:
        opened[0] += 1
        return make()

    store._pool._connect = counted
    try:
        ids = [store.create_conversation(f"c{n}").id for n in range(32)]
        start = threading.Barrier(32)

        def work(conversation_id: str) -> None:
            start.wait()
            for _ in range(10):
                store.head(conversation_id)
                store.event_count(conversation_id)

        threads = [threading.Thread(target=work, args=(cid,)) for cid in ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert opened[0] <= 8
        assert _sessions(postgres_url, "store") == store._pool.open_connections <= 8
    finally:
        store.close()
    wait_until(lambda: _sessions(postgres_url, "store") == 0)
