"""SQLite's locks: run leases in a file of their own beside the store's, and the write lock
taken in short steps (``sqlite_locking``) when another connection holds it."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from treadle.events.model import MessageEvent
from treadle.runtime.snapshots.location import store_files
from treadle.store.base import StoreError
from treadle.store.leases import open_leases, sqlite_leases_path
from treadle.store.sqlite import SqliteEventStore
from treadle.store.sqlite_locking import begin_immediate, enter_wal_mode
from treadle.store.urls import open_store


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'events.db'}"
    open_store(url).close()
    return url


def test_leases_live_in_their_own_file_beside_the_store(tmp_path, store_url):
    leases = open_leases(store_url)
    try:
        assert leases.acquire("c-1", "server-a", 30)
        assert leases.holder("c-1") == "server-a"
    finally:
        leases.close()
    leases_file = tmp_path / "events.db-leases"
    assert sqlite_leases_path(tmp_path / "events.db") == leases_file
    with sqlite3.connect(leases_file) as conn:
        assert conn.execute("SELECT conversation_id, owner FROM run_leases").fetchall() == [
            ("c-1", "server-a")
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    with sqlite3.connect(tmp_path / "events.db") as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "run_leases" not in tables


def test_a_lease_is_taken_while_another_process_holds_the_stores_write_lock(tmp_path, store_url):
    # An event commit holds the store file's write lock through its fsync: a lease write
    # must not wait for it (nor an event commit for a lease write).
    holder = sqlite3.connect(tmp_path / "events.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    leases = open_leases(store_url)
    try:
        assert leases.acquire("c-1", "server-a", 30)
        assert leases.renew("c-1", "server-a", 30)
        leases.release("c-1", "server-a")
        assert leases.holder("c-1") is None
    finally:
        leases.close()
        holder.execute("ROLLBACK")
        holder.close()


def test_leases_of_a_path_with_no_store_are_refused_and_make_no_file(tmp_path):
    with pytest.raises(StoreError, match="there is no store there; open the store first"):
        open_leases(f"sqlite:///{tmp_path / 'missing.db'}")
    assert list(tmp_path.iterdir()) == []


def test_the_leases_files_are_the_stores_own_never_snapshotted(tmp_path, store_url):
    files = store_files(store_url)
    for name in ("events.db", "events.db-wal", "events.db-leases", "events.db-leases-wal"):
        assert (tmp_path / name).resolve() in files


def _locked_by_another(path):
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_begin_immediate_waits_for_the_other_writer_and_then_takes_the_lock(tmp_path):
    path = tmp_path / "file.db"
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    assert enter_wal_mode(conn, 5) == "wal"
    other = _locked_by_another(path)
    released = threading.Event()

    def release_soon():
        released.wait(10)
        other.execute("COMMIT")

    releaser = threading.Thread(target=release_soon)
    releaser.start()
    # The first tries find the lock taken; the lock is freed while this one waits.
    timer = threading.Timer(0.05, released.set)
    timer.start()
    try:
        begin_immediate(conn, 5)
        assert conn.in_transaction
        conn.execute("CREATE TABLE t (x)")
        conn.execute("COMMIT")
    finally:
        released.set()
        timer.cancel()
        timer.join()
        releaser.join()
        other.close()
    # The connection's own busy timeout is back for its other statements.
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (5000,)
    conn.close()


def test_begin_immediate_gives_up_after_the_busy_timeout_with_sqlites_error(tmp_path):
    path = tmp_path / "file.db"
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    enter_wal_mode(conn, 5)
    other = _locked_by_another(path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            begin_immediate(conn, 0.05)
        assert not conn.in_transaction
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (50,)
    finally:
        other.execute("ROLLBACK")
        other.close()
        conn.close()


def test_a_locked_store_still_names_the_busy_timeout_in_its_error(tmp_path):
    store = SqliteEventStore(tmp_path / "events.db", busy_timeout=0.05)
    conversation = store.create_conversation("c").id
    other = _locked_by_another(tmp_path / "events.db")
    try:
        with pytest.raises(StoreError, match=r"stayed locked by another writer for more than"):
            store.append(conversation, MessageEvent(source="user", text="hi"))
    finally:
        other.execute("ROLLBACK")
        other.close()
        store.close()
