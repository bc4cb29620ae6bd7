"""The last status kept per conversation by the append (store/status_columns.py): it equals
what a search of the log finds (``read_status`` before the end), on random logs with branches,
batches, side leaves and look-alike events, on both backends, after appends by another
process, after a refused append, and after the migration that adds it to a store that has
events already."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.postgres import fresh_schema_url
from support.schema_rewind import postgres_back_to, sqlite_back_to
from treadle.errors import AppendError
from treadle.events.model import ROOT, Event, MessageEvent, StateChangeEvent
from treadle.runtime.status import (
    ConversationStatus,
    read_status,
    recorded_status,
    status_event,
)
from treadle.store import postgres_schema, sqlite_schema
from treadle.store.base import EventStore, StoreError
from treadle.store.status_columns import postgres_add_status_columns, sqlite_add_status_columns
from treadle.store.urls import open_store


def _random_batches(rng: random.Random, count: int) -> list[list[Event]]:
    """Batches of statuses (with and without reasons, several in one batch), other facts,
    a status fact with a value no status has, and messages whose text looks like one."""
    batches: list[list[Event]] = []
    ids: list[str] = []
    for number in range(count):
        batch: list[Event] = []
        for index in range(rng.randint(1, 4)):
            parent = batch[-1].id if batch else (rng.choice(ids) if ids else ROOT)
            kind = rng.choice(["status", "status", "fact", "bogus", "message"])
            event_id = f"e{number}-{index}"
            if kind == "status":
                status = rng.choice(list(ConversationStatus))
                reason = rng.choice([None, f"why {number}", "ünïcode ✓"])
                event: Event = status_event(status, parent, reason).model_copy(
                    update={"id": event_id}
                )
            elif kind == "fact":
                event = StateChangeEvent(
                    id=event_id, key="isolation", value={"status": "paused"}, parent_id=parent
                )
            elif kind == "bogus":
                event = StateChangeEvent(
                    id=event_id, key="status", value={"status": "nope"}, parent_id=parent
                )
            else:
                event = MessageEvent(
                    id=event_id,
                    source="user",
                    text='{"key":"status","value":{"status":"error"}}',
                    parent_id=parent,
                )
            batch.append(event)
        ids.extend(event.id for event in batch)
        batches.append(batch)
    return batches


def _searched(store: EventStore, conversation: str) -> tuple[ConversationStatus, str | None]:
    """What a search of the whole log says (the path ``read_status`` takes for an earlier
    status)."""
    end = store.get_conversation(conversation).event_count
    return read_status(store, conversation, before_seq=end)


def test_the_kept_status_is_the_last_one_the_log_records(store: EventStore) -> None:
    seen: set[ConversationStatus] = set()
    for seed in range(12):
        rng = random.Random(seed)
        conversation = f"c{seed}"
        store.create_conversation(conversation)
        assert recorded_status(store.get_conversation(conversation)) == (
            ConversationStatus.IDLE,
            None,
        )
        for batch in _random_batches(rng, rng.randint(1, 20)):
            if len(batch) == 1 and rng.random() < 0.5:
                store.append(conversation, batch[0], move_head=rng.random() < 0.8)
            else:
                store.append_batch(conversation, batch, move_head=rng.random() < 0.8)
            kept = recorded_status(store.get_conversation(conversation))
            assert kept == _searched(store, conversation)
            assert read_status(store, conversation) == kept
            seen.add(kept[0])
    listed = {info.id: info for info in store.list_conversations()}
    for seed in range(12):
        assert recorded_status(listed[f"c{seed}"]) == _searched(store, f"c{seed}")
    assert len(seen) >= 4  # the logs did change status


def test_a_refused_append_leaves_the_status(store: EventStore) -> None:
    store.create_conversation("c")
    store.append("c", status_event(ConversationStatus.RUNNING, ROOT), move_head=False)
    finished = status_event(ConversationStatus.FINISHED, ROOT, "done")
    repeated = MessageEvent(id="m", source="user", text="hi", parent_id=ROOT)
    store.append("c", repeated)
    with pytest.raises(AppendError):
        store.append_batch("c", [finished, repeated])  # the repeated id refuses the batch
    assert read_status(store, "c") == (ConversationStatus.RUNNING, None)


_OTHER_PROCESS = textwrap.dedent(
    """
    import sys
    from treadle.events.model import ROOT
    from treadle.runtime.status import ConversationStatus, status_event
    from treadle.store.urls import open_store

    with open_store(sys.argv[1]) as store:
        for number in range(20):
            status = ConversationStatus.RUNNING if number < 19 else ConversationStatus.FINISHED
            store.append("c", status_event(status, ROOT, f"{sys.argv[2]} {number}"),
                         move_head=False)
    """
)


def test_appends_of_another_process_move_the_status(store_url: str) -> None:
    with open_store(store_url) as store:
        store.create_conversation("c")
        store.append("c", MessageEvent(source="user", text="go", parent_id=ROOT))
        assert read_status(store, "c") == (ConversationStatus.IDLE, None)
        process = subprocess.Popen([sys.executable, "-c", _OTHER_PROCESS, store_url, "other"])
        assert process.wait(timeout=120) == 0
        assert read_status(store, "c") == (ConversationStatus.FINISHED, "other 19")
        assert read_status(store, "c") == _searched(store, "c")


def test_a_damaged_status_is_named(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as store:
        store.create_conversation("c")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE conversations SET status = 'exploded'")
    conn.close()
    with (
        open_store(f"sqlite:///{path}") as store,
        pytest.raises(StoreError, match="conversation 'c' has a bad status"),
    ):
        store.get_conversation("c")


def _fill(store: EventStore) -> dict[str, tuple[ConversationStatus, str | None]]:
    rng = random.Random(7)
    for name in ("a", "b", "none"):
        store.create_conversation(name)
        if name != "none":
            for batch in _random_batches(rng, 15):
                store.append_batch(name, batch)
            store.append(name, status_event(ConversationStatus.PAUSED, ROOT, name))
    return {name: _searched(store, name) for name in ("a", "b", "none")}


def _check_migrated(url: str, expected: dict[str, tuple[ConversationStatus, str | None]]) -> None:
    assert expected["a"] == (ConversationStatus.PAUSED, "a")
    assert expected["none"] == (ConversationStatus.IDLE, None)
    with open_store(url) as store:
        for name, status in expected.items():
            assert recorded_status(store.get_conversation(name)) == status
        store.append("a", status_event(ConversationStatus.FINISHED, ROOT))
        assert read_status(store, "a") == (ConversationStatus.FINISHED, None)


def test_sqlite_store_without_the_status_gets_it_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        expected = _fill(store)
    # Back to the schema before the step: the columns gone, the version before it.
    before = sqlite_schema.MIGRATIONS.index(sqlite_add_status_columns)
    undo = [f"ALTER TABLE conversations DROP COLUMN {c}" for c in ("status", "status_reason")]
    sqlite_back_to(path, before, undo)
    _check_migrated(url, expected)
    assert sqlite_schema.read_schema_version(path) == sqlite_schema.schema_version()


@pytest.mark.postgres
def test_postgres_store_without_the_status_gets_it_when_opened() -> None:
    with fresh_schema_url() as url:
        with open_store(url) as store:
            expected = _fill(store)
        before = postgres_schema.MIGRATIONS.index((postgres_add_status_columns,))
        undo = ["ALTER TABLE conversations DROP COLUMN status, DROP COLUMN status_reason"]
        postgres_back_to(url, before, undo)
        _check_migrated(url, expected)
