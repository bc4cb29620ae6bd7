"""Group commit (store/group_commit.py) on a real SQLite file: units of waiting threads share one
commit; each caller hears of its unit only once that commit is visible to another connection;
a refused unit is undone alone; a failed commit fails the whole group and stores nothing; and
the SQLite store's appends from many threads stay gap-free and whole.

The grouping is made certain, not left to timing: the leader's unit holds until the others are
queued behind it (polled with a deadline), then lets go; units queued while a group runs join
its commit, so all of them share the leader's."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.waiting import wait_until
from treadle.events.json_limits import JsonLimitError
from treadle.events.model import ROOT, MessageEvent
from treadle.store.group_commit import GroupCommit
from treadle.store.sqlite import SqliteEventStore


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[GroupCommit, Path]]:
    path = tmp_path / "group.db"
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    setup.execute(
        "CREATE TABLE rows (name TEXT, parent INTEGER REFERENCES parent(id) "
        "DEFERRABLE INITIALLY DEFERRED)"
    )
    setup.close()
    local = threading.local()
    opened: list[sqlite3.Connection] = []

    def connection() -> sqlite3.Connection:
        if not hasattr(local, "conn"):
            local.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            local.conn.execute("PRAGMA foreign_keys=ON")
            opened.append(local.conn)
        return local.conn

    yield GroupCommit(connection, threading.Lock()), path
    for conn in opened:
        conn.close()


def names(path: Path) -> list[str]:
    reader = sqlite3.connect(path)
    try:
        return sorted(row[0] for row in reader.execute("SELECT name FROM rows"))
    finally:
        reader.close()


def insert(name: str, parent: int | None = None) -> Callable[[sqlite3.Connection], str]:
    def unit(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO rows (name, parent) VALUES (?, ?)", (name, parent))
        return name

    return unit


def run_group(
    commits: GroupCommit,
    followers: list[Callable[[sqlite3.Connection], str]],
    *,
    atomic: frozenset[int] = frozenset(),
    leader_fails: bool = False,
) -> dict[str, object]:
    """The leader's unit waits until every follower is queued, so they join its commit;
    returns each caller's outcome (its value or the error it got) by name. The followers at
    the indexes ``atomic`` are run as atomic units (no savepoint)."""
    release = threading.Event()
    outcomes: dict[str, object] = {}

    def leader(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO rows (name) VALUES ('leader')")
        release.wait(60)
        if leader_fails:
            raise ValueError("APPEND-DUP-ID: the leader's own unit refused")
        return "leader"

    def call(name: str, unit: Callable[[sqlite3.Connection], str], is_atomic: bool) -> None:
        try:
            outcomes[name] = commits.run(unit, atomic=is_atomic)
        except Exception as error:
            outcomes[name] = error

    threads = [threading.Thread(target=call, args=("leader", leader, False))]
    threads[0].start()
    wait_until(lambda: commits._leading, timeout_s=30)
    for index, unit in enumerate(followers):
        threads.append(threading.Thread(target=call, args=(f"f{index}", unit, index in atomic)))
        threads[-1].start()
    wait_until(lambda: len(commits._waiting) == len(followers), timeout_s=30)
    release.set()
    for thread in threads:
        thread.join(60)
    return outcomes


def test_waiting_units_share_one_commit_and_hear_of_it_only_after_it(database) -> None:
    commits, path = database

    def follower(name: str) -> Callable[[sqlite3.Connection], str]:
        inner = insert(name)

        def unit(conn: sqlite3.Connection) -> str:
            assert names(path).count(name) == 0  # not committed while the unit runs
            return inner(conn)

        return unit

    before = commits.groups
    outcomes = run_group(commits, [follower("a"), follower("b"), follower("c")])
    assert outcomes == {"leader": "leader", "f0": "a", "f1": "b", "f2": "c"}
    assert commits.groups - before == 1  # queued while the leader's unit ran: they joined it
    assert names(path) == ["a", "b", "c", "leader"]  # visible to another connection


def test_a_refused_unit_is_undone_alone(database) -> None:
    commits, path = database

    def refused(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO rows (name) VALUES ('refused')")
        raise ValueError("APPEND-DUP-ID: refused")

    outcomes = run_group(commits, [insert("kept-1"), refused, insert("kept-2")])
    assert isinstance(outcomes["f1"], ValueError)
    assert (outcomes["f0"], outcomes["f2"]) == ("kept-1", "kept-2")
    assert names(path) == ["kept-1", "kept-2", "leader"]


def test_a_refused_first_unit_is_undone_alone(database) -> None:
    # the first unit of a transaction runs without a savepoint: its refusal rolls the
    # transaction back, and the units queued behind it run in a new one
    commits, path = database
    outcomes = run_group(commits, [insert("kept-1"), insert("kept-2")], leader_fails=True)
    assert isinstance(outcomes["leader"], ValueError)
    assert (outcomes["f0"], outcomes["f1"]) == ("kept-1", "kept-2")
    assert names(path) == ["kept-1", "kept-2"]


def test_an_atomic_unit_refused_before_writing_needs_no_savepoint(database) -> None:
    commits, path = database

    def refused(conn: sqlite3.Connection) -> str:
        raise ValueError("APPEND-NO-PARENT: refused before any write")

    outcomes = run_group(
        commits, [insert("kept-1"), refused, insert("kept-2")], atomic=frozenset({1, 2})
    )
    assert isinstance(outcomes["f1"], ValueError)
    assert (outcomes["f0"], outcomes["f2"]) == ("kept-1", "kept-2")
    assert names(path) == ["kept-1", "kept-2", "leader"]


def test_an_atomic_unit_that_fails_after_writing_fails_its_whole_group(database) -> None:
    # its write cannot be undone alone, so nothing of the group may be stored
    commits, path = database

    def broken(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO rows (name) VALUES ('half')")
        raise ValueError("not atomic after all")

    outcomes = run_group(commits, [insert("x"), broken], atomic=frozenset({1}))
    for name in ("leader", "f0", "f1"):
        assert isinstance(outcomes[name], ValueError), outcomes
    assert names(path) == []


def test_a_failed_commit_fails_the_whole_group_and_stores_nothing(database) -> None:
    commits, path = database
    # a deferred foreign key: every unit succeeds, the COMMIT itself is refused
    outcomes = run_group(commits, [insert("x"), insert("orphan", parent=42), insert("y")])
    for name in ("leader", "f0", "f1", "f2"):
        assert isinstance(outcomes[name], sqlite3.IntegrityError), outcomes
    assert names(path) == []


def test_a_lone_unit_that_fails_is_rolled_back_and_raised(database) -> None:
    commits, path = database

    def broken(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO rows (name) VALUES ('half')")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        commits.run(broken)
    assert commits.run(insert("after")) == "after"
    assert names(path) == ["after"]


def test_an_append_refused_before_it_queues_fails_only_its_caller(tmp_path: Path) -> None:
    # The stored JSON is made on the caller's thread before it queues (prepare_append): an
    # event the store cannot hold is refused there, no commit is made or shared for it.
    with SqliteEventStore(tmp_path / "store.db") as store:
        store.create_conversation("c")
        before = store._commits.groups
        with pytest.raises(JsonLimitError, match="lone surrogate"):
            store.append("c", MessageEvent(source="user", text="\udc80", parent_id=ROOT))
        assert store._commits.groups == before
        assert store._commits._waiting == []
        assert not store._commits._leading
        assert store.append("c", MessageEvent(source="user", text="ok", parent_id=ROOT)) == 0


def test_appends_from_many_threads_are_whole_and_gap_free(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "store.db")
    try:
        ids = [store.create_conversation(f"c{i}").id for i in range(8)]
        per_thread = 40
        errors: list[BaseException] = []

        def writer(conversation: str) -> None:
            try:
                parent = ROOT
                for n in range(per_thread):
                    event = MessageEvent(
                        source="user", text=f"{conversation} {n}", parent_id=parent
                    )
                    store.append(conversation, event)
                    parent = event.id
            except BaseException as error:  # reported below, never lost in a thread
                errors.append(error)

        threads = [threading.Thread(target=writer, args=(cid,)) for cid in ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        for cid in ids:
            stored = store.get_range(cid, 0, 10**6)
            assert [item.seq for item in stored] == list(range(per_thread))
            assert [item.event.text for item in stored] == [f"{cid} {n}" for n in range(per_thread)]
    finally:
        store.close()
