"""Real faults under an open SQLite store (issue 10, items 24 and 25): its file removed or
replaced, the disk full, the file read-only, the write lock held. Writes are refused with
StoreUnavailable instead of acknowledged, and no empty store is ever made in the file's place."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from treadle.events.model import ROOT, MessageEvent
from treadle.store.base import StoreError, StoreUnavailable
from treadle.store.leases import SqliteRunLeases
from treadle.store.sqlite import SqliteEventStore


def msg(event_id: str, parent: str | None = None, text: str = "") -> MessageEvent:
    return MessageEvent(id=event_id, source="user", text=text or event_id, parent_id=parent)


def _files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


def _in_thread(action):
    """``action()`` run in a new thread (a new per-thread connection): its result or error."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(action())
        except Exception as error:  # handed back to the test
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return outcome[0]


def test_a_removed_store_refuses_writes_and_creates_no_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteEventStore(path) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        stream = store.subscribe("c", poll_interval=0.01)
        assert next(stream).seq == 0
        for file in _files(path):
            file.unlink(missing_ok=True)
        with pytest.raises(StoreUnavailable, match="was removed"):
            next(stream)  # a waiting subscriber hears of it instead of idling forever
        with pytest.raises(StoreUnavailable, match="was removed"):
            store.append("c", msg("b"))
        with pytest.raises(StoreUnavailable, match="was removed"):
            store.create_conversation("d")
        # a thread that opens its first connection now must not make an empty store there
        assert isinstance(_in_thread(lambda: store.append("c", msg("b"))), StoreUnavailable)
        assert isinstance(_in_thread(lambda: store.list_conversations()), StoreUnavailable)
        with pytest.raises(StoreUnavailable):
            store.subscribe("c")
    assert not path.exists()


def test_a_replaced_store_refuses_writes_and_leaves_the_new_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    other = tmp_path / "other.db"
    with SqliteEventStore(other) as store:
        store.create_conversation("other")
    with SqliteEventStore(path) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        for file in _files(path):
            file.unlink(missing_ok=True)
        os.replace(other, path)
        with pytest.raises(StoreUnavailable, match="replaced by another file"):
            store.append("c", msg("b"))
        assert isinstance(_in_thread(lambda: store.append("c", msg("b"))), StoreUnavailable)
    with SqliteEventStore(path) as reopened:
        assert [info.id for info in reopened.list_conversations()] == ["other"]


def test_a_full_database_is_store_unavailable_and_stores_nothing(tmp_path: Path) -> None:
    with SqliteEventStore(tmp_path / "store.db") as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        conn = store._holder().conn  # SQLite's own limit: the file may not grow by a page
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreUnavailable, match="disk is full"):
            store.append("c", msg("b", text="x" * 100_000))
        conn.execute("PRAGMA max_page_count = 1073741823")
        assert [e.id for e in store.path_to_root("c")] == ["a"]
        assert store.append("c", msg("b")) == 1


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A 1 MiB tmpfs (root only): a real ENOSPC. Skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_store_unavailable_and_keeps_what_was_acknowledged(tiny_disk: Path):
    acknowledged: list[str] = []
    refusal: StoreError | None = None
    with SqliteEventStore(tiny_disk / "store.db", durability="fast") as store:
        store.create_conversation("c")
        parent = ROOT
        for index in range(10_000):
            event = msg(f"e{index}", parent, text="x" * 2000)
            try:
                store.append("c", event)
            except StoreError as error:
                refusal = error
                break
            acknowledged.append(event.id)
            parent = event.id
    assert isinstance(refusal, StoreUnavailable), refusal
    assert "full" in str(refusal)
    assert acknowledged
    with SqliteEventStore(tiny_disk / "store.db") as reopened:
        assert [e.id for e in reopened.path_to_root("c")] == acknowledged


def test_a_held_write_lock_is_store_unavailable_after_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteEventStore(path, busy_timeout=0.1) as store:
        store.create_conversation("c")
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreUnavailable, match="stayed locked"):
                store.append("c", msg("a", ROOT))
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert store.append("c", msg("a", ROOT)) == 0


_WRITER = textwrap.dedent(
    """
    import sys
    from treadle.events.model import ROOT, MessageEvent
    from treadle.store.sqlite import SqliteEventStore
    store = SqliteEventStore(sys.argv[1])
    assert store.get_conversation("c").event_count == 1  # reading works
    try:
        store.append("c", MessageEvent(id="b", source="user", text="b", parent_id=ROOT))
    except Exception as error:
        print(type(error).__name__, error)
    else:
        print("appended")
    """
)


def test_a_read_only_store_refuses_writes_loudly(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteEventStore(path) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        store.checkpoint()
    path.chmod(0o444)
    command = [sys.executable, "-c", _WRITER, str(path)]
    if os.geteuid() == 0:
        # root writes to any file: drop the capabilities that bypass file permissions
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot drop the permission bypass")
        drop = "-dac_override,-dac_read_search,-fowner"
        command = [setpriv, "--inh-caps=-all", f"--bounding-set={drop}", *command]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("StoreUnavailable"), done.stdout
    assert "read-only" in done.stdout
    path.chmod(0o644)
    with SqliteEventStore(path) as store:
        assert [e.id for e in store.path_to_root("c")] == ["a"]


def test_a_damaged_file_stays_a_store_error_not_an_outage(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SqliteEventStore(path) as store:
        store.create_conversation("c")
        store.checkpoint()
    data = bytearray(path.read_bytes())
    data[4096 : 4096 + 64] = b"\xff" * 64  # the second page: the first table's b-tree
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as raised, SqliteEventStore(path) as store:
        store.list_conversations()
    assert not isinstance(raised.value, StoreUnavailable)


def test_leases_need_the_store_file_and_never_create_one(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with pytest.raises(StoreError, match="open the store first"):
        SqliteRunLeases(str(path))
    assert not path.exists()
