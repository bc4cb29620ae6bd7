"""The branch index: ``branch_summary`` read from the line rows kept at append time equals the
summary of a full walk and ``EventTree``'s heads and branch points, on both backends, also for a
store made by the schema before the index (migrated when opened)."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.postgres import fresh_schema_url
from treadle.events.branches import BranchSummary, summary_of_shapes
from treadle.events.model import ROOT, Event, MessageEvent, StateChangeEvent
from treadle.events.tree import EventTree
from treadle.store import postgres_schema, sqlite_schema
from treadle.store.base import EventStore
from treadle.store.urls import open_store

ROWS = "conversation, seq, id, parent_seq, branch, kind, source, time_us, payload"


def untimed(summary: BranchSummary) -> BranchSummary:
    return dataclasses.replace(
        summary, branches=[dataclasses.replace(b, time_us=0) for b in summary.branches]
    )


def check_index(store: EventStore, conv: str) -> BranchSummary:
    summary = store.branch_summary(conv)
    shapes = store.shapes(conv)
    tree = EventTree(shapes)  # type: ignore[arg-type]
    assert summary.heads == tree.heads()
    assert summary.branch_points == tree.branch_points()
    assert untimed(summary) == summary_of_shapes(shapes, store.head(conv))
    for point in summary.points:
        assert point.children == [c.id for c in tree.children(point.id) if c.kind != "state_change"]
    for shape in shapes:
        assert [c.event.id for c in store.children(conv, shape.id)] == [
            c.id for c in tree.children(shape.id)
        ]
    for branch in summary.branches:
        assert branch.length == len(tree.path_to_root(branch.head))
    return summary


# Each step: (kind, parent choice): parent None = legacy (the previous event), -1 = a root,
# else an index into the events so far (modulo their number).
steps = st.lists(
    st.tuples(
        st.sampled_from(["message", "message", "state_change"]), st.none() | st.integers(-1, 50)
    ),
    min_size=1,
    max_size=25,
)


def events_of(plan: list[tuple[str, int | None]]) -> list[Event]:
    events: list[Event] = []
    for number, (kind, choice) in enumerate(plan):
        if choice is None or not events:
            parent = None if events else ROOT
        else:
            parent = ROOT if choice == -1 else events[choice % len(events)].id
        event_id = f"e{number}"
        if kind == "state_change":
            events.append(
                StateChangeEvent(id=event_id, key="status", value={"n": number}, parent_id=parent)
            )
        else:
            events.append(MessageEvent(id=event_id, source="user", text=event_id, parent_id=parent))
    return events


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=steps, batch=st.integers(1, 4))
def test_index_equals_a_full_walk(store: EventStore, plan, batch: int) -> None:
    conv = store.create_conversation().id
    events = events_of(plan)
    for start in range(0, len(events), batch):  # single appends and batches
        store.append_batch(conv, events[start : start + batch])
    check_index(store, conv)


def test_summary_of_a_tree(store: EventStore) -> None:
    conv = store.create_conversation().id
    events = [
        MessageEvent(id="a", source="user", text="a"),
        MessageEvent(id="b", source="agent", text="b"),
        MessageEvent(id="c", source="user", text="c", parent_id="a"),
        StateChangeEvent(id="s", key="status", value={}, parent_id="c"),
        MessageEvent(id="x", source="user", text="x"),  # legacy: hangs from the state change
        MessageEvent(id="e", source="agent", text="e", parent_id="b"),
        MessageEvent(id="f", source="agent", text="f", parent_id="b"),
    ]
    store.append_batch(conv, events[:3])
    for event in events[3:]:
        store.append(conv, event)
    summary = check_index(store, conv)
    assert summary.head == "f"
    assert summary.heads == ["c", "x", "e", "f"]
    assert [(b.id, b.head, b.base, b.parent, b.length, b.active) for b in summary.branches] == [
        ("c", "c", "a", "a", 2, False),
        ("x", "x", "s", "c", 4, False),
        ("a", "e", None, None, 3, False),
        ("f", "f", "b", "a", 3, True),
    ]
    assert [(p.id, p.line, p.children) for p in summary.points] == [
        ("a", "a", ["b", "c"]),
        ("b", "a", ["e", "f"]),
    ]
    empty = store.create_conversation().id
    assert store.branch_summary(empty) == BranchSummary(head=None, heads=[], branch_points=[])
    store.delete_conversation(conv)
    with pytest.raises(Exception, match="does not exist"):
        store.branch_summary(conv)


def _old_rows(tmp_path: Path) -> list[tuple]:
    """Rows of a small branched log, as the schema before the index stored them."""
    with open_store(f"sqlite:///{tmp_path / 'scratch.db'}") as scratch:
        conv = scratch.create_conversation("old").id
        scratch.append_batch(
            conv,
            [
                MessageEvent(id="a", source="user", text="a"),
                MessageEvent(id="b", source="agent", text="b"),
                StateChangeEvent(id="s", key="status", value={}, parent_id="b"),
                MessageEvent(id="c", source="user", text="c", parent_id="a"),
                MessageEvent(id="d", source="user", text="d", parent_id="b"),
            ],
        )
        conn = sqlite3.connect(tmp_path / "scratch.db")
        rows = conn.execute(f"SELECT {ROWS} FROM events ORDER BY seq").fetchall()
        conn.close()
    return rows


def _after_migration(store: EventStore) -> None:
    summary = check_index(store, "old")
    assert summary.heads == ["c", "d"]
    assert summary.branch_points == ["a"]
    store.append("old", MessageEvent(id="e", source="agent", text="e", parent_id="d"))
    store.append("old", MessageEvent(id="f", source="agent", text="f", parent_id="a"))
    assert check_index(store, "old").heads == ["c", "e", "f"]


def test_sqlite_store_of_the_old_schema_is_indexed_when_opened(tmp_path: Path) -> None:
    rows = _old_rows(tmp_path)
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for migration in sqlite_schema.MIGRATIONS[:2]:  # the released schema, version 2
        migration(conn)
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.execute(
        "INSERT INTO conversations (key, id, created_at, updated_at, head_id, event_count) "
        "VALUES (1, 'old', '2024-01-01T00:00:00+00:00', '2024-01-01T00:00:00+00:00', 'd', 5)"
    )
    conn.executemany(f"INSERT INTO events ({ROWS}) VALUES (?,?,?,?,?,?,?,?,?)", rows)
    conn.close()
    with open_store(f"sqlite:///{path}") as store:
        _after_migration(store)
    assert sqlite_schema.read_schema_version(path) == sqlite_schema.schema_version()


@pytest.mark.postgres
def test_postgres_store_of_the_old_schema_is_indexed_when_opened(tmp_path: Path) -> None:
    rows = [(*row[:3], None if row[3] < 0 else row[3], *row[4:]) for row in _old_rows(tmp_path)]
    with fresh_schema_url() as url:
        schema = url.rsplit("schema=", 1)[1].split("&")[0]
        dsn = url.split("?")[0].replace("postgresql+treadle", "postgresql")
        with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute("CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)")
            conn.execute(
                "INSERT INTO meta VALUES ('application', 'treadle'), ('schema_version', '1')"
            )
            for statement in postgres_schema.MIGRATIONS[0]:
                conn.execute(statement)  # type: ignore[arg-type]
            conn.execute(
                "INSERT INTO conversations (id, created_at, updated_at, head_id, event_count) "
                "VALUES ('old', now(), now(), 'd', 5)"
            )
            key = conn.execute("SELECT key FROM conversations").fetchone()[0]  # type: ignore[index]
            with conn.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO events ({ROWS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                    [(key, *row[1:]) for row in rows],
                )
        with open_store(url) as store:
            _after_migration(store)
