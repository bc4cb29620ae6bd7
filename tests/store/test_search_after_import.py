"""A search right after an import is an index search: ``treadle import`` (one bulk
``append_batch``) returns with the conversation's text index complete, on SQLite (every event
below the index's mark) and on PostgreSQL (nothing left in the GIN index's pending list), and
live appends still leave the index to later."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from treadle.cli import app
from treadle.events.model import ROOT, MessageEvent, event_to_json
from treadle.store.base import EventQuery
from treadle.store.bulk_appends import BULK_APPEND_EVENTS
from treadle.store.postgres import PostgresEventStore
from treadle.store.sqlite import SqliteEventStore
from treadle.store.sqlite_text import TAIL_TO_INDEX
from treadle.store.urls import open_store

IMPORTED = BULK_APPEND_EVENTS + 44


def _log(path: Path, count: int) -> list[MessageEvent]:
    events, parent = [], ROOT
    for n in range(count):
        # long texts: on PostgreSQL the batch's entries are more than a pending list page
        text = f"imported line {n:05d} " + " ".join(f"word{n}x{k}" for k in range(60))
        events.append(MessageEvent(id=f"e{n}", source="user", text=text, parent_id=parent))
        parent = f"e{n}"
    path.write_text("".join(event_to_json(event) + "\n" for event in events), encoding="utf-8")
    return events


def _left_to_index(store: object, conversation_id: str) -> int:
    """What the store's text index still lacks: SQLite, the events above its mark;
    PostgreSQL, the pages of its pending list (merging them says how many there were)."""
    if isinstance(store, SqliteEventStore):
        return store.text_index_lag(conversation_id)
    assert isinstance(store, PostgresEventStore)
    return store.index_text()


def test_an_imported_log_is_indexed_when_the_import_returns(store_url: str, tmp_path: Path):
    events = _log(tmp_path / "log.jsonl", IMPORTED)
    result = CliRunner().invoke(
        app, ["import", "jsonl", str(tmp_path / "log.jsonl"), "--store", store_url, "--id", "c"]
    )
    assert result.exit_code == 0, result.output
    store = open_store(store_url)
    try:
        assert store.get_conversation("c").event_count == len(events)
        assert _left_to_index(store, "c") == 0
        found = store.search("c", EventQuery(text="IMPORTED LINE 00277 "))
        assert [item.event.id for item in found.items] == ["e277"]
        assert store.count("c", EventQuery(text="word123x59")) == 1
    finally:
        store.close()


def test_live_appends_leave_the_index_for_later(store_url: str, tmp_path: Path):
    events = _log(tmp_path / "log.jsonl", BULK_APPEND_EVENTS - 1)
    store = open_store(store_url)
    try:
        store.create_conversation("c")
        store.append_batch("c", events[:-1])  # the biggest batch that is not a bulk load
        store.append("c", events[-1])
        if isinstance(store, SqliteEventStore):
            assert store.text_index_lag("c") == len(events)
        # found all the same: the events above the mark are scanned
        found = store.search("c", EventQuery(text="imported line 00254 "))
        assert [item.event.id for item in found.items] == [events[-1].id]
    finally:
        store.close()


def test_a_batch_below_a_bulk_load_leaves_no_more_than_a_search_scans():
    # what a smaller batch leaves unindexed is within what a search scans before it asks
    # the indexer: the threshold and the tail are one figure
    assert BULK_APPEND_EVENTS <= TAIL_TO_INDEX
