"""The audit summary a store keeps (store/audit_summary.py): an audit restored from the
store's checkpoint and extended by the events after it answers as a full audit of the stored
log, for every head, on both backends, through appends, forks, bulk imports, moved heads,
deleted and re-created conversations, and stores made before the checkpoints existed."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.test_audit_incremental import logs
from support.schema_rewind import sqlite_back_to
from treadle.bench.workload import realistic_events
from treadle.events.audit import audit_events
from treadle.events.model import ROOT, EventBase
from treadle.server.audit_cache import AuditCache
from treadle.store import audit_summary, sqlite_schema
from treadle.store.audit_summary import audit_stored, restored_audit
from treadle.store.base import EventStore
from treadle.store.bulk_appends import BULK_APPEND_EVENTS
from treadle.store.sqlite import SqliteEventStore


def storable(log: list[EventBase]) -> list[EventBase]:
    """``log`` without what a store refuses: repeated ids, parents not in the log (and what
    hangs below them)."""
    seen: set[str] = set()
    kept: list[EventBase] = []
    for event in log:
        parent = event.parent_id
        if event.id in seen or (parent not in (None, ROOT) and parent not in seen):
            continue
        seen.add(event.id)
        kept.append(event)
    return kept


def stored_events(store: EventStore, conversation_id: str) -> list[EventBase]:
    count = store.get_conversation(conversation_id).event_count
    return [item.event for item in store.get_range(conversation_id, 0, count)]


def check(store: EventStore, conversation_id: str) -> None:
    """The kept summary's answer (a "fresh process": nothing in memory) for every head
    equals a full audit of the stored events; so does a new server cache's answer."""
    events = stored_events(store, conversation_id)
    saved = store.head(conversation_id)
    ids = [event.id for event in events]
    for head in dict.fromkeys([None, saved, "not-an-event", *ids[-3:], *ids[:2], *ids[::7]]):
        expected = audit_events(events, head=head if head is not None else saved)
        assert audit_stored(store, conversation_id, head) == expected, head
    answer = json.loads(AuditCache().answer(store, conversation_id, None, 5))
    assert answer == audit_events(events, head=saved).to_summary_dict(5)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(log=logs(), data=st.data())
def test_the_kept_summary_answers_as_a_full_audit(
    store: EventStore, monkeypatch: pytest.MonkeyPatch, log: list[EventBase], data: st.DataObject
) -> None:
    monkeypatch.setattr(audit_summary, "KEEP_EVERY", data.draw(st.sampled_from([0, 1, 3])))
    events = storable(log)
    conversation_id = f"c-{uuid.uuid4().hex[:12]}"
    store.create_conversation(conversation_id)
    done = 0
    while done < len(events):
        size = data.draw(st.integers(1, 8))
        batch = events[done : done + size]
        store.append_batch(conversation_id, batch, move_head=data.draw(st.booleans()))
        done += len(batch)
        if data.draw(st.booleans()):
            stored = [event.id for event in events[:done]]
            store.set_head(conversation_id, data.draw(st.sampled_from([None, *stored])))
        if data.draw(st.booleans()):
            check(store, conversation_id)
    check(store, conversation_id)
    if data.draw(st.booleans()):  # deleted and re-created: never the old summary
        store.delete_conversation(conversation_id)
        store.create_conversation(conversation_id)
        again = events[: data.draw(st.integers(0, len(events)))]
        if again:
            store.append_batch(conversation_id, again)
        assert audit_stored(store, conversation_id) == audit_events(again)
        check(store, conversation_id)


def test_a_bulk_import_a_fork_and_the_tail(store: EventStore, monkeypatch) -> None:
    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 100)
    store.create_conversation("big")
    log = realistic_events(3 * BULK_APPEND_EVENTS, seed=5)
    store.append_batch("big", log)  # a bulk append
    check(store, "big")
    assert restored_audit(store, store.get_conversation("big")) is not None
    side = realistic_events(20, seed=6)
    side[0] = side[0].model_copy(update={"parent_id": log[100].id})
    store.append_batch("big", side, move_head=False)  # a fork from an older event
    check(store, "big")
    # the fork made the audit walk the whole log again: kept at once, though only 20 are new
    found = store.audit_checkpoint("big")
    assert found is not None
    assert found[0] == store.get_conversation("big").event_count
    more = realistic_events(30, seed=7)
    more[0] = more[0].model_copy(update={"parent_id": log[-1].id})
    store.append_batch("big", more)  # continues the main line: the tail only
    check(store, "big")


def test_a_fresh_server_cache_starts_from_the_checkpoint(store: EventStore, monkeypatch) -> None:
    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 50)
    store.create_conversation("c")
    log = realistic_events(400, seed=8)
    store.append_batch("c", log[:300])
    AuditCache().answer(store, "c", None)  # builds and keeps the checkpoint
    assert store.audit_checkpoint("c") is not None
    store.append_batch("c", log[300:])
    read: list[tuple[int, int]] = []
    original = store.audit_facts

    def counted(conversation_id: str, start: int, end: int):  # type: ignore[no-untyped-def]
        read.append((start, end))
        return original(conversation_id, start, end)

    monkeypatch.setattr(store, "audit_facts", counted)
    answer = json.loads(AuditCache().answer(store, "c", None))
    assert answer == audit_events(log).to_summary_dict(1000)
    assert sum(end - start for start, end in read) <= 120  # the tail and a few records


def test_a_checkpoint_never_goes_back_nor_past_the_log(store: EventStore) -> None:
    store.create_conversation("c")
    store.append_batch("c", realistic_events(10, seed=1))
    store.keep_audit_checkpoint("c", 8, b"eight")
    store.keep_audit_checkpoint("c", 5, b"five")
    store.keep_audit_checkpoint("c", 11, b"eleven: more than the log")
    found = store.audit_checkpoint("c")
    assert found is not None
    assert (found[0], found[2]) == (8, b"eight")
    assert restored_audit(store, store.get_conversation("c")) is None  # not a checkpoint
    assert audit_stored(store, "c") == audit_events(stored_events(store, "c"))


def test_a_store_made_before_the_checkpoints_opens_and_audits(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "old.db"
    step = sqlite_schema.MIGRATIONS.index(audit_summary.sqlite_add_audit_checkpoints)
    old = SqliteEventStore(path)
    old.create_conversation("c")
    log = realistic_events(300, seed=2)
    old.append_batch("c", log)
    old.close()
    # Back to the schema before the step (the steps after it run again, as they may).
    sqlite_back_to(path, step, ["DROP TABLE audit_checkpoints"])
    assert sqlite_schema.read_schema_version(path) == step
    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 10)
    store = SqliteEventStore(path)
    try:
        assert store.audit_checkpoint("c") is None
        assert audit_stored(store, "c") == audit_events(log)  # builds it lazily
        assert store.audit_checkpoint("c") is not None
        assert audit_stored(store, "c") == audit_events(log)  # from it
    finally:
        store.close()
    assert sqlite_schema.read_schema_version(path) == sqlite_schema.schema_version()


def test_writers_and_auditors_at_once_keep_a_right_summary(store_url: str, monkeypatch) -> None:
    """Two handles (connections of their own, as two processes) append live batches on two
    branches while two more audit and keep checkpoints; afterwards the answers from what
    they kept equal a full audit's."""
    import threading

    from treadle.store.urls import open_store

    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 7)
    handles = [open_store(store_url) for _ in range(4)]
    handles[0].create_conversation("c")
    log = realistic_events(600, seed=11)
    # two writers on two branches: the main line and a side branch from its 10th event
    handles[0].append_batch("c", log[:10])
    side = realistic_events(200, seed=12)
    side[0] = side[0].model_copy(update={"parent_id": log[9].id})
    errors: list[BaseException] = []
    done = threading.Event()

    def write(store: EventStore, events: list[EventBase], move_head: bool) -> None:
        try:
            for start in range(0, len(events), 10):
                store.append_batch("c", events[start : start + 10], move_head=move_head)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    def audit(store: EventStore) -> None:
        try:
            while not done.is_set():
                report = audit_stored(store, "c")
                assert sum(report.counts.values()) >= 10
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    writers = [
        threading.Thread(target=write, args=(handles[0], log[10:], True)),
        threading.Thread(target=write, args=(handles[1], side, False)),
    ]
    auditors = [threading.Thread(target=audit, args=(handle,)) for handle in handles[2:]]
    try:
        for thread in [*writers, *auditors]:
            thread.start()
        for thread in writers:
            thread.join()
        done.set()
        for thread in auditors:
            thread.join()
        assert not errors, errors
        check(handles[2], "c")
        check(handles[3], "c")
    finally:
        for handle in handles:
            handle.close()
