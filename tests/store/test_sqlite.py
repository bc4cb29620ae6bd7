"""What only the SQLite backend has: URLs and the default store, durability settings, schema
migrations, first opens racing, query plans that never scan a log, closing under a subscriber."""

from __future__ import annotations

import multiprocessing
import re
import sqlite3
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from support.store_workers import open_and_append
from treadle.events.model import ROOT, MessageEvent, event_to_json
from treadle.store import sqlite_schema
from treadle.store.base import EventQuery, StoreError
from treadle.store.sqlite import SqliteEventStore, read_schema_version, schema_version
from treadle.store.sqlite_schema import MIGRATIONS
from treadle.store.time_keys import timestamp_us
from treadle.store.urls import default_store_url, open_store


def msg(event_id: str, parent: str | None = None) -> MessageEvent:
    return MessageEvent(id=event_id, source="user", text=event_id, parent_id=parent)


# -- URLs --------------------------------------------------------------------------------------


def test_relative_and_absolute_urls(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel.db")
    absolute = open_store(f"sqlite:///{tmp_path / 'abs.db'}")
    try:
        assert relative.path == tmp_path / "rel.db"
        assert absolute.path == tmp_path / "abs.db"
        assert absolute.url == f"sqlite:////{str(tmp_path / 'abs.db').lstrip('/')}"
        assert (tmp_path / "rel.db").exists()
    finally:
        relative.close()
        absolute.close()


def test_default_store_url(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TREADLE_STORE", "sqlite:///from-env.db")
    assert default_store_url() == "sqlite:///from-env.db"
    monkeypatch.delenv("TREADLE_STORE")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    expected = tmp_path / ".local" / "share" / "treadle"
    assert default_store_url() == f"sqlite:///{expected / 'treadle.db'}"
    assert expected.is_dir()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_url() == f"sqlite:///{tmp_path / 'xdg' / 'treadle' / 'treadle.db'}"


@pytest.mark.parametrize(("query", "synchronous"), [("", 2), ("?durability=fast", 1)])
def test_durability_modes(tmp_path: Path, query: str, synchronous: int) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}{query}")
    try:
        conn = store._holder().conn
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous  # FULL=2
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 10_000
    finally:
        store.close()


def test_keyword_options_override_the_url(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}?durability=fast", durability="durable")
    try:
        assert store.durability == "durable"
    finally:
        store.close()


def test_create_false_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store"):
        open_store(f"sqlite:///{tmp_path / 'typo.db'}", create=False)
    assert not (tmp_path / "typo.db").exists()


# -- schema versions ---------------------------------------------------------------------------


def make_version_1_store(path: Path) -> list[MessageEvent]:
    """A store as Treadle's schema version 1 wrote it (before the timestamp column went)."""
    events = [msg("a", ROOT), msg("b", "a"), msg("old", "b"), msg("new", "b")]
    rows = [  # (seq, event, parent_seq, branch)
        (0, events[0], -1, 0),
        (1, events[1], 0, 0),
        (2, events[2], 1, 0),
        (3, events[3], 1, 3),
    ]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN")
    MIGRATIONS[0](conn)
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.execute(
        "INSERT INTO conversations (key, id, created_at, updated_at, head_id, event_count, "
        "metadata) VALUES (1, 'c', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00', "
        "'new', 4, '{\"made_by\": \"v1\"}')"
    )
    for seq, event, parent_seq, branch in rows:
        conn.execute(
            "INSERT INTO events VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                seq,
                event.id,
                parent_seq,
                branch,
                event.kind,
                event.source,
                event.timestamp,
                timestamp_us(event.timestamp),
                event_to_json(event),
            ),
        )
    conn.execute("COMMIT")
    conn.close()
    return events


def test_a_version_1_store_opens_and_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    events = make_version_1_store(path)
    assert read_schema_version(path) == 1
    store = SqliteEventStore(path)
    try:
        info = store.get_conversation("c")
        assert (info.event_count, info.head_id, info.metadata) == (4, "new", {"made_by": "v1"})
        assert [e.id for e in store.path_to_root("c")] == ["a", "b", "new"]
        assert [s.event for s in store.get_range("c", 0, 10)] == events
        page = store.search("c", EventQuery(kinds=["message"], sources=["user"]))
        assert [item.seq for item in page.items] == [0, 1, 2, 3]
        assert store.append("c", msg("next", "old")) == 4
        assert [e.id for e in store.path_to_root("c", "next")] == ["a", "b", "old", "next"]
    finally:
        store.close()
    assert read_schema_version(path) == schema_version()


def test_a_future_migration_runs_on_open(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "old.db"
    store = SqliteEventStore(path)
    store.create_conversation("c", metadata={"made_by": "now"})
    store.append_batch("c", [msg("a", ROOT), msg("b", "a")])
    store.close()
    current = schema_version()

    def add_labels(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE conversations ADD COLUMN labels TEXT NOT NULL DEFAULT '[]'")

    monkeypatch.setattr(sqlite_schema, "MIGRATIONS", [*MIGRATIONS, add_labels])
    assert schema_version() == current + 1
    store = SqliteEventStore(path)
    try:
        conn = store._holder().conn
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version[0] == str(current + 1)
        assert store.get_conversation("c").metadata == {"made_by": "now"}
        assert [e.id for e in store.path_to_root("c")] == ["a", "b"]
        assert store.append("c", msg("c", "b")) == 2
        columns = {row[1] for row in conn.execute("PRAGMA table_info(conversations)")}
        assert "labels" in columns
    finally:
        store.close()


def test_first_opens_racing_in_several_processes(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=open_and_append, args=(str(path), n)) for n in range(4)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [child.exitcode for child in children] == [0, 0, 0, 0]
    store = SqliteEventStore(path)
    try:
        assert store.get_conversation("c").event_count == 4
    finally:
        store.close()


# -- query plans: every read is an index search, never a scan of a log --------------------------


@pytest.fixture
def big(tmp_path: Path):
    store = SqliteEventStore(tmp_path / "big.db", durability="fast")
    store.create_conversation("c")
    events, parent = [], ROOT
    for index in range(3000):
        if index == 1500:
            fork = parent
        event = msg(f"e{index}", parent)
        events.append(event)
        parent = event.id
    side = [msg(f"s{index}", fork if index == 0 else f"s{index - 1}") for index in range(50)]
    store.append_batch("c", events[:2000])
    store.append_batch("c", side)
    store.append_batch("c", events[2000:])
    yield store
    store.close()


def _statements_of(store: SqliteEventStore, action) -> list[str]:
    conn = store._holder().conn
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        action()
    finally:
        conn.set_trace_callback(None)
    return [s for s in seen if s.lstrip().upper().startswith(("SELECT", "WITH"))]


def _plans(store: SqliteEventStore, statements: list[str]) -> list[str]:
    conn = sqlite3.connect(store.path)
    try:
        return [
            " / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}"))
            for statement in statements
        ]
    finally:
        conn.close()


@pytest.mark.parametrize(
    "read",
    [
        lambda s: s.path_to_root("c", limit=50),
        lambda s: s.path_to_root("c", "s49", limit=80),
        lambda s: s.search("c", EventQuery(limit=100)),
        lambda s: s.search("c", EventQuery(order="desc", limit=100)),
        lambda s: s.search("c", EventQuery(kinds=["message", "action"], limit=100)),
        lambda s: s.search("c", EventQuery(sources=["user"], after_seq=1000)),
        lambda s: s.search("c", EventQuery(branch_head="s49", order="desc")),
        lambda s: s.search("c", EventQuery(branch_head="e2999", after_seq=2500)),
        lambda s: s.search("c", EventQuery(kinds=["message"], branch_head="e2999")),
        lambda s: s.count("c", EventQuery(kinds=["message"], after_seq=10)),
        lambda s: s.count("c", EventQuery(branch_head="s49", sources=["user"])),
        lambda s: s.search("c", EventQuery(time_from=datetime(2000, 1, 1, tzinfo=UTC))),
        lambda s: s.search("c", EventQuery(time_to=datetime(2000, 1, 1, tzinfo=UTC))),
        lambda s: s.search("c", EventQuery(text="e12", order="desc")),
        lambda s: s.get_event("c", "e1234"),
        lambda s: s.get_range("c", 100, 150),
    ],
)
def test_reads_use_indexes_only(big: SqliteEventStore, read) -> None:
    statements = _statements_of(big, lambda: read(big))
    assert statements
    for statement, plan in zip(statements, _plans(big, statements), strict=True):
        # json_each walks its own argument; an FTS5 table read by MATCH (index "...:M...") is
        # read through its trigram index: neither is a scan of stored events.
        assert not re.search(r"\bSCAN (?!json_each|\w+ VIRTUAL TABLE INDEX \d+:M)", plan), (
            statement,
            plan,
        )
        assert "TEMP B-TREE" not in plan, (statement, plan)


def test_the_branch_summary_reads_by_index_only(big: SqliteEventStore) -> None:
    """O(branches): one lookup per wanted seq or base (was a walk of the whole conversation
    in seq order for the bases' children)."""
    statements = _statements_of(big, lambda: big.branch_summary("c"))
    assert statements
    for statement, plan in zip(statements, _plans(big, statements), strict=True):
        # the only scans allowed are of the JSON list of wanted seqs (aliased j)
        assert not re.search(r"\bSCAN (?!j\b|json_each)", plan), (statement, plan)
        # nor a range of events over the whole conversation
        assert not re.search(r"SEARCH e(vents)? .*\(conversation=\?\)", plan), (statement, plan)
    assert big.branch_summary("c").heads == ["s49", "e2999"]


def test_a_path_window_costs_statements_per_fork_not_per_event(big: SqliteEventStore) -> None:
    statements = _statements_of(big, lambda: big.path_to_root("c", "s49"))
    assert len(statements) <= 8  # 2 segments: the side branch and the main chain below it
    window = _statements_of(big, lambda: big.path_to_root("c", limit=50))
    assert len(window) <= 4


# -- live ----------------------------------------------------------------------------------------


def test_close_ends_a_waiting_subscriber(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "s.db")
    store.create_conversation("c")
    stream = store.subscribe("c", poll_interval=0.01)
    got: list[int] = []
    done = threading.Event()

    def consume() -> None:
        got.extend(item.seq for item in stream)
        done.set()

    thread = threading.Thread(target=consume)
    thread.start()
    store.append("c", msg("a"))
    threading.Timer(0.2, store.close).start()
    assert done.wait(30), "the subscriber did not end when the store closed"
    thread.join()
    assert got == [0]


def test_deleting_the_conversation_ends_its_subscribers(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "s.db")
    try:
        store.create_conversation("c")
        store.append("c", msg("a"))
        stream = store.subscribe("c", poll_interval=0.01)
        assert next(stream).seq == 0
        threading.Timer(0.1, store.delete_conversation, args=("c",)).start()
        assert list(stream) == []
    finally:
        store.close()


def test_a_closed_store_refuses_work(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "s.db")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.create_conversation("c")


def _work_until_closed(
    store: SqliteEventStore, write: bool, started: threading.Barrier, outcomes: list[str]
) -> None:
    started.wait()
    try:
        while True:
            if write:
                store.append("c", msg(uuid.uuid4().hex))
            else:
                store.path_to_root("c")
                store.list_conversations()
    except StoreError as error:
        outcomes.append(str(error))


def test_closing_while_other_threads_read_and_write_refuses_them_without_a_crash(
    tmp_path: Path,
) -> None:
    # close() used to close a connection under a statement another thread was stepping:
    # SQLite then freed what that thread still read (the test worker died); and a connection
    # a thread opened while close() ran stayed open, serving that thread after the close.
    for attempt in range(20):
        store = SqliteEventStore(tmp_path / "s.db")
        if "c" not in {info.id for info in store.list_conversations()}:
            store.create_conversation("c")
        outcomes: list[str] = []
        started = threading.Barrier(4)
        threads = [
            threading.Thread(target=_work_until_closed, args=(store, i != 1, started, outcomes))
            for i in range(3)
        ]
        for thread in threads:
            thread.start()
        started.wait()
        time.sleep(0.01 * (attempt % 2))  # half of the closes race the threads' first opens
        store.close()
        for thread in threads:
            thread.join(30)
        assert len(outcomes) == 3
        assert all("closed" in outcome for outcome in outcomes), outcomes
