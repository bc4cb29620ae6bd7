"""An import keeps the audit checkpoint of the log it stored (store/audit_summary.py
``keep_imported``): the checkpoint is the one an audit of the stored rows gives, byte for byte,
so the first audit of an imported conversation (restored from it, in a fresh process or a
server) answers as a full audit from scratch; and a checkpoint the store refuses never fails
the import. Both backends, through ``treadle import jsonl``, ``import_conversation`` (OpenHands
folders: the CLI's and the server's import) and random logs with violations and legacy parents.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from events.test_audit_incremental import logs
from store.test_audit_summary import check, storable, stored_events
from support.cli import invoke_treadle
from treadle.bench.workload import realistic_events
from treadle.events.audit import IncrementalAudit, audit_events
from treadle.events.model import ROOT, EventBase, event_to_dict
from treadle.server.audit_cache import AuditCache
from treadle.store import audit_summary
from treadle.store.audit_summary import audit_stored, keep_imported, stored_log_facts
from treadle.store.base import EventStore, StoreError
from treadle.store.openhands import export_conversation, import_conversation
from treadle.store.urls import open_store


def branched_log() -> list[EventBase]:
    """A main line with a side branch, events with no parent (legacy:
    the one before) and contract violations the store holds (a result answering an action
    already answered, one naming no action of the log)."""
    main = realistic_events(400, seed=21)
    side = [renamed(event, "side-") for event in realistic_events(60, seed=22)]
    side[0] = side[0].model_copy(update={"parent_id": main[150].id})
    legacy = [event.model_copy(update={"parent_id": None}) for event in main[1:5]]
    results = [event for event in main if event.kind == "observation"]
    again = results[3].model_copy(update={"id": "answered-again", "parent_id": None})
    unknown = results[5].model_copy(
        update={"id": "answers-nothing", "parent_id": None, "action_id": "no-such-action"}
    )
    # the side branch appended before the main line goes on from its fork point (what a
    # store's log of a fork looks like): the walk of the tree ends on the main line, the head
    log = [main[0], *legacy, *main[5:151], *side, *main[151:], again, unknown]
    assert audit_events(log).violations  # violations the store holds, imported as they are
    return log


def renamed(event: EventBase, prefix: str) -> EventBase:
    """``event`` with its id, and the ids it names, prefixed (a log of other ids)."""
    update = {"id": prefix + event.id}
    for name in ("parent_id", "action_id"):
        value = getattr(event, name, None)
        if value is not None and value != ROOT:
            update[name] = prefix + value
    return event.model_copy(update=update)


def the_checkpoint_of_the_rows(
    store: EventStore, conversation_id: str, count: int | None = None
) -> bytes:
    """What an audit of the stored rows (the first ``count``; default all) from scratch keeps."""
    if count is None:
        count = store.get_conversation(conversation_id).event_count
    data = IncrementalAudit(store.audit_facts(conversation_id, 0, count)).checkpoint()
    assert data is not None
    return data


def assert_kept_from_the_import(store: EventStore, conversation_id: str) -> None:
    """The store holds the import's checkpoint of the whole log, equal to the rows'; the audit
    restored from it reads only a few records, and answers as a full audit of the log."""
    count = store.get_conversation(conversation_id).event_count
    found = store.audit_checkpoint(conversation_id)
    assert found is not None
    assert found[0] == count
    assert found[2] == the_checkpoint_of_the_rows(store, conversation_id)
    restored = audit_summary.restored_audit(store, store.get_conversation(conversation_id))
    assert restored is not None
    assert len(restored) == count
    check(store, conversation_id)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(log=logs())
def test_the_imported_checkpoint_is_the_stored_logs(
    store: EventStore, monkeypatch: pytest.MonkeyPatch, log: list[EventBase]
) -> None:
    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 0)
    events = storable(log)
    conversation_id = f"c-{uuid.uuid4().hex[:12]}"
    store.create_conversation(conversation_id)
    if events:
        store.append_batch(conversation_id, events)
    # the records as the store reads them back: parents resolved, a first legacy event a root
    assert stored_log_facts(events) == store.audit_facts(conversation_id, 0, len(events))
    keep_imported(store, conversation_id, events)
    assert_kept_from_the_import(store, conversation_id)


def write_jsonl(path: Path, events: list[EventBase]) -> Path:
    path.write_text("".join(json.dumps(event_to_dict(event)) + "\n" for event in events))
    return path


def test_treadle_import_jsonl_keeps_the_checkpoint(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 100)
    log = branched_log()
    done = invoke_treadle(
        "import",
        "jsonl",
        str(write_jsonl(tmp_path / "log.jsonl", log)),
        "--store",
        store_url,
        "--id",
        "imported",
    )
    assert done.returncode == 0, done.stderr
    store = open_store(store_url)
    try:
        assert_kept_from_the_import(store, "imported")
        read: list[tuple[int, int]] = []
        original = store.audit_facts

        def counted(conversation_id: str, start: int, end: int):  # type: ignore[no-untyped-def]
            read.append((start, end))
            return original(conversation_id, start, end)

        monkeypatch.setattr(store, "audit_facts", counted)
        expected = audit_events(stored_events(store, "imported"), head=store.head("imported"))
        answer = json.loads(AuditCache().answer(store, "imported", None, 1000))
        assert answer == expected.to_summary_dict(1000)  # a fresh server's first audit
        assert audit_stored(store, "imported") == expected  # a fresh `treadle audit`'s
        assert sum(end - start for start, end in read) <= 20, read  # a few records, not the log
    finally:
        store.close()


def test_an_openhands_import_keeps_the_checkpoint(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 100)
    log = realistic_events(300, seed=23)
    info = store.create_conversation()
    store.append_batch(info.id, log)
    export_conversation(store, info.id, tmp_path / "folder")
    store.delete_conversation(info.id)
    result = import_conversation(store, tmp_path / "folder")
    assert result.imported, result.problems
    assert result.conversation_id is not None
    assert_kept_from_the_import(store, result.conversation_id)


def test_a_checkpoint_not_kept_never_fails_the_import(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 100)

    def refused(self, conversation_id: str, upto: int, state: bytes) -> None:  # type: ignore[no-untyped-def]
        raise StoreError("the store is read-only")

    from treadle.store.sqlite import SqliteEventStore

    monkeypatch.setattr(SqliteEventStore, "keep_audit_checkpoint", refused)
    log = branched_log()
    with caplog.at_level(logging.WARNING, logger=audit_summary.__name__):
        done = invoke_treadle(
            "import",
            "jsonl",
            str(write_jsonl(tmp_path / "log.jsonl", log)),
            "--store",
            sqlite_url,
            "--id",
            "imported",
        )
    assert done.returncode == 0, done.stderr
    assert "audit checkpoint of 'imported' not kept: the store is read-only" in caplog.text
    monkeypatch.undo()
    store = open_store(sqlite_url)
    try:
        assert store.get_conversation("imported").event_count == len(log)
        assert store.audit_checkpoint("imported") is None
        assert audit_stored(store, "imported") == audit_events(log, head=store.head("imported"))
    finally:
        store.close()


def test_a_small_import_leaves_it_to_the_first_audit(store: EventStore) -> None:
    store.create_conversation("small")
    log = realistic_events(50, seed=24)
    store.append_batch("small", log)
    keep_imported(store, "small", log)  # below KEEP_EVERY: its first audit walks it, cheaply
    assert store.audit_checkpoint("small") is None


def test_a_fork_keeps_the_checkpoint_of_the_path_it_copied(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork's log starts as a copy of the parent's path (``record_fork``): the copy keeps
    its checkpoint as an import's does, so the fork's first audit walks nothing of it."""
    from treadle.runtime.forking import record_fork

    monkeypatch.setattr(audit_summary, "KEEP_EVERY", 100)
    store.create_conversation("parent")
    store.append_batch("parent", branched_log())
    head = store.head("parent")
    copied = len(store.path_to_root("parent", head))
    child = record_fork(store, "parent", head, title=None, workspace=None, snapshots=None)
    found = store.audit_checkpoint(child)
    assert found is not None
    # Of the copied path: what the fork appends after it (a status, when calls wait for an
    # answer) is walked from the checkpoint on.
    assert found[0] == copied
    assert found[2] == the_checkpoint_of_the_rows(store, child, copied)
    check(store, child)  # the audit from it answers as a full audit of the fork's log
