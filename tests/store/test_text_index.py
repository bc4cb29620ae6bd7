"""The SQLite text index (treadle.store.sqlite_text): a search returns exactly what the scan of
the whole log returns, however much of the log is indexed; an event is found as soon as it is
appended, by this store object or another process; the background indexer starts on demand
and stops with the store; a store of the schema before the index is migrated; deleting a
conversation deletes its index rows."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.schema_rewind import sqlite_back_to
from support.store_workers import append_messages
from support.waiting import wait_until
from treadle.events.model import ROOT, ActionEvent, MessageEvent
from treadle.store import sqlite_schema, sqlite_text
from treadle.store.base import EventQuery
from treadle.store.bulk_appends import BULK_APPEND_EVENTS
from treadle.store.sqlite import SqliteEventStore

# Characters where a scan and a trigram index could disagree: case, letters whose case folding
# leaves ASCII (Kelvin sign, dotted I, sharp s), JSON escapes (quote, backslash, newline,
# control characters written as \u00XX) and characters beyond the BMP.
ALPHABET = 'aAbBkKzZ "\\\n\t\x01/É鵪İıKß😀-_:{}'
texts = st.text(alphabet=ALPHABET, max_size=30)


def _message(event_id: str, text: str, parent: str | None) -> MessageEvent:
    return MessageEvent(id=event_id, source="user", text=text, parent_id=parent)


def _action(event_id: str, command: str, parent: str | None) -> ActionEvent:
    return ActionEvent(
        id=event_id,
        source="agent",
        llm_response_id=f"r-{event_id}",
        tool_call_id=f"c-{event_id}",
        tool_name="terminal",
        arguments={"command": command},
        raw_arguments=json.dumps({"command": command}),
        parent_id=parent,
    )


def _fill(store: SqliteEventStore, conv: str, items: list[tuple[bool, str, int | None]]) -> None:
    """Append one event per item: (is a message, its text, its parent's index or None for
    the previous event); a parent index past the events so far forks from the last one."""
    ids: list[str] = []
    for index, (is_message, text, parent) in enumerate(items):
        if parent is None or not ids:
            parent_id: str | None = ids[-1] if ids else ROOT
        else:
            parent_id = ids[min(parent, len(ids) - 1)]
        event_id = f"{conv}-{index}"
        make = _message if is_message else _action
        store.append(conv, make(event_id, text, parent_id), move_head=parent is None)
        ids.append(event_id)


def _answers(store: SqliteEventStore, conv: str, queries: list[EventQuery]) -> list[object]:
    """Each query's page (seqs and cursor) and count."""
    answers: list[object] = []
    for query in queries:
        page = store.search(conv, query)
        answers.append(([item.seq for item in page.items], page.next_cursor))
        answers.append(store.count(conv, query))
    return answers


def _index_some(path: Path, conv: str, chunk: int) -> None:
    """Index ``chunk`` more events of ``conv`` through a connection of its own (as another
    process's indexer would)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        key = conn.execute("SELECT key FROM conversations WHERE id = ?", (conv,)).fetchone()[0]
        sqlite_text.index_chunk(conn, key, chunk)
        conn.execute("COMMIT")
    finally:
        conn.close()


def _plain_scan(store: SqliteEventStore, conv: str, needle: str) -> list[int]:
    """The scan's rule written out: the needle, lower-cased, in the lower-cased stored JSON
    (SQLite's lower() folds ASCII only; a needle beyond ASCII is compared with str.lower)."""
    needle = needle.lower()
    found = []
    for stored in store.get_range(conv, 0, 10**9):
        payload = stored.payload
        folded = (
            "".join(c.lower() if c.isascii() else c for c in payload)
            if needle.isascii()
            else payload.lower()
        )
        if needle in folded:
            found.append(stored.seq)
    return found


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory):
    store = SqliteEventStore(tmp_path_factory.mktemp("text") / "store.db")
    yield store
    store.close()


_counter = iter(range(10**9))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(
        st.tuples(st.booleans(), texts, st.none() | st.integers(0, 40)), min_size=1, max_size=40
    ),
    needles=st.lists(texts | st.sampled_from(['"', "\\", "\\n", "kind", 'text":"a']), min_size=1),
    data=st.data(),
)
def test_searches_equal_the_scan_however_much_is_indexed(
    shared_store: SqliteEventStore, items, needles, data
) -> None:
    store = shared_store
    conv = f"c{next(_counter)}"
    store.create_conversation(conv)
    _fill(store, conv, items)
    for index, needle in enumerate(needles):
        if needle and needle in items[index % len(items)][1]:
            continue
        # often a needle that occurs: a piece of one of the texts
        text = items[index % len(items)][1]
        start = data.draw(st.integers(0, len(text)))
        needles[index] = text[start : start + data.draw(st.integers(1, 8))] or needle
    count = len(items)
    head = store.head(conv)
    heads = [head, None, *[s.id for s in store.shapes(conv)][-2:]]
    queries = [
        EventQuery(
            text=needle,
            order=data.draw(st.sampled_from(["asc", "desc"])),
            limit=data.draw(st.integers(1, 5)),
            after_seq=data.draw(st.none() | st.integers(-1, count)),
            before_seq=data.draw(st.none() | st.integers(0, count + 1)),
            kinds=data.draw(st.none() | st.sampled_from([["message"], ["action"]])),
            branch_head=data.draw(st.sampled_from(heads)),
        )
        for needle in needles
        if needle
    ] + [EventQuery(text=needle, limit=1000) for needle in needles if needle]
    scanned = _answers(store, conv, queries)  # nothing indexed: the scan itself
    for query in queries[len(queries) // 2 :]:
        assert query.text is not None
        seqs = [item.seq for item in store.search(conv, query).items]
        assert seqs == _plain_scan(store, conv, query.text)
    _index_some(store.path, conv, data.draw(st.integers(1, count)))
    assert _answers(store, conv, queries) == scanned  # part indexed, the rest scanned
    store.index_text(conv)
    assert store.text_index_lag(conv) == 0
    assert _answers(store, conv, queries) == scanned  # all indexed


def test_the_index_answers_indexed_needles(tmp_path: Path) -> None:
    """The page of an indexable needle is read through the FTS table, in seq order, with no
    sort and no scan of the events (the plan of sqlite_text.index_rows)."""
    store = SqliteEventStore(tmp_path / "s.db")
    try:
        store.create_conversation("c")
        _fill(store, "c", [(True, f"word {i}", None) for i in range(5)])
        store.index_text()
        conn = store._holder().conn
        conditions = " AND instr(lower(payload), ?) > 0"
        plan = [
            row[-1]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT e.seq, e.payload FROM events_text AS t "
                "CROSS JOIN events AS e ON e.conversation = ? AND e.seq = t.rowid - ? "
                f"WHERE events_text MATCH ? AND t.rowid > ? AND t.rowid < ?{conditions} "
                "ORDER BY t.rowid DESC LIMIT ?",
                (1, 1 << 36, '"wor"', 0, 2**62, "word", 10),
            )
        ]
        assert plan[0].startswith("SCAN t VIRTUAL TABLE INDEX"), plan
        assert any("(conversation=? AND seq=?)" in step for step in plan[1:]), plan
        assert not any("TEMP B-TREE" in step for step in plan), plan
    finally:
        store.close()


def test_an_event_is_found_as_soon_as_appended(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteEventStore(path)
    other = SqliteEventStore(path)  # another store object: its own connections and indexer
    try:
        store.create_conversation("c")
        _fill(store, "c", [(True, f"filler {i}", None) for i in range(50)])
        store.index_text()
        query = EventQuery(text="Fresh-Needle", order="desc")
        assert store.search("c", query).items == []
        seq = other.append("c", _message("new", "a fresh-needle here", "c-49"))
        assert [item.seq for item in store.search("c", query).items] == [seq]
        assert store.text_index_lag("c") == 1  # found from the tail, not the index
        store.index_text()
        assert [item.seq for item in store.search("c", query).items] == [seq]
        assert store.count("c", query) == 1
    finally:
        other.close()
        store.close()


def _append_live(store: SqliteEventStore, conv: str, events: list[MessageEvent]) -> None:
    """Append ``events`` in batches below a bulk load, which would index them at once."""
    size = BULK_APPEND_EVENTS - 1
    for start in range(0, len(events), size):
        store.append_batch(conv, events[start : start + size])


def _indexer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("treadle-text-index")]


def test_searches_start_the_indexer_which_catches_up_and_stops_with_the_store(
    tmp_path: Path,
) -> None:
    baseline = len(_indexer_threads())
    store = SqliteEventStore(tmp_path / "s.db")
    try:
        store.create_conversation("c")
        total = sqlite_text.TAIL_TO_INDEX * 3
        _append_live(
            store,
            "c",
            [
                _message(f"m{i}", f"line {i} of the log", f"m{i - 1}" if i else ROOT)
                for i in range(total)
            ],
        )
        assert len(_indexer_threads()) == baseline  # appends start nothing
        query = EventQuery(text="OF THE LOG", limit=7, order="desc")
        scanned = store.search("c", query)
        assert len(_indexer_threads()) == baseline + 1  # a long tail was scanned
        wait_until(lambda: store.text_index_lag("c") == 0, what="the indexer caught up")
        wait_until(store._indexer.idle, what="the indexer idle")
        assert store.search("c", query) == scanned
        # a short tail is scanned without asking for more indexing
        store.append("c", _message("late", "late of the log", f"m{total - 1}"))
        assert store.search("c", query).items[0].event.id == "late"
        assert store._indexer.idle()
    finally:
        store.close()
    assert len(_indexer_threads()) == baseline


def test_the_index_stays_right_while_another_process_appends(tmp_path: Path) -> None:
    """Another process appends while this store's indexer indexes: the high-water mark is
    read and written in the file, inside the indexer's write transaction, so no event is
    skipped or indexed twice."""
    path = tmp_path / "s.db"
    store = SqliteEventStore(path)
    try:
        store.create_conversation("c")
        _append_live(
            store,
            "c",
            [_message(f"m{i}", f"x {i}", f"m{i - 1}" if i else ROOT) for i in range(600)],
        )
        child = multiprocessing.get_context("spawn").Process(
            target=append_messages, args=(f"sqlite:///{path}", "c", 400)
        )
        child.start()
        try:
            query = EventQuery(text='"text":"x', limit=1000)
            while child.is_alive():
                store.search("c", query)  # asks the indexer to catch up, again and again
            child.join()
        finally:
            child.join(60)
        assert child.exitcode == 0
        wait_until(lambda: (store.search("c", query), store._indexer.idle())[1], what="idle")
        store.index_text()
        assert store.text_index_lag("c") == 0
        everything = EventQuery(text='"source":"user"', limit=2000)
        assert [i.seq for i in store.search("c", everything).items] == list(range(1000))
        assert store.count("c", everything) == 1000
        conn = store._holder().conn
        rows = conn.execute(
            "SELECT count(*) FROM events_text WHERE events_text MATCH '\"sou\"'"
        ).fetchone()[0]
        assert rows == 1000  # each event indexed once
    finally:
        store.close()


def test_deleting_a_conversation_deletes_its_index_rows(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "s.db")
    try:
        store.create_conversation("keep")
        _fill(store, "keep", [(True, f"kept needle {i}", None) for i in range(20)])
        store.create_conversation("gone")
        _fill(store, "gone", [(True, f"gone needle {i}", None) for i in range(30)])
        store.index_text()
        conn = store._holder().conn

        def index_rows() -> int:
            return int(
                conn.execute(
                    "SELECT count(*) FROM events_text WHERE events_text MATCH '\"nee\"'"
                ).fetchone()[0]
            )

        assert index_rows() == 50
        store.delete_conversation("gone")
        assert index_rows() == 20
        assert conn.execute("SELECT count(*) FROM text_marks").fetchone()[0] == 1
        # a new conversation may get the deleted one's key: no stale rows answer for it
        store.create_conversation("new")
        _fill(store, "new", [(True, "fresh", None), (True, "gone needle", None)])
        store.index_text()
        query = EventQuery(text="gone needle")
        assert [item.seq for item in store.search("new", query).items] == [1]
        assert store.count("new", query) == 1
        assert len(store.search("keep", EventQuery(text="kept needle", limit=100)).items) == 20
    finally:
        store.close()


def test_a_store_of_the_schema_before_the_index_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    before = sqlite_schema.MIGRATIONS.index(sqlite_schema._migration_text_index)
    old = SqliteEventStore(path)
    old.create_conversation("c")
    _fill(old, "c", [(True, f"Old Text {i}", None) for i in range(40)])
    old.close()
    # Back to the schema before the index: its tables gone, the version before its step (the
    # steps after it run again, as they may).
    sqlite_back_to(path, before, ["DROP TABLE events_text", "DROP TABLE text_marks"])
    assert sqlite_schema.read_schema_version(path) == before
    store = SqliteEventStore(path)
    try:
        query = EventQuery(text="old text 3", limit=100)
        expected = [3, *range(30, 40)]
        assert [item.seq for item in store.search("c", query).items] == expected
        assert store.text_index_lag("c") == 40
        assert store.index_text() == 40
        assert [item.seq for item in store.search("c", query).items] == expected
    finally:
        store.close()
    assert sqlite_schema.read_schema_version(path) == sqlite_schema.schema_version()


@pytest.mark.parametrize("most", [0, 3, 10_000])
def test_filtered_pages_and_counts_of_frequent_needles_equal_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, most: int
) -> None:
    """A filtered page or a count whose needle has more candidates than the limit is
    answered without the index (sqlite_search.text_split); either way, as the scan."""
    from treadle.store import sqlite_search

    monkeypatch.setattr(sqlite_search, "_TEXT_CANDIDATES", most)
    store = SqliteEventStore(tmp_path / "s.db")
    try:
        store.create_conversation("c")
        _fill(store, "c", [(i % 3 == 0, f"common word {i % 5}", None) for i in range(40)])
        queries = [
            EventQuery(text=needle, kinds=kinds, order=order, limit=4)
            for needle in ("common", "word 3", "nowhere")
            for kinds in (None, ["message"], ["action"])
            for order in ("asc", "desc")
        ]
        scanned = _answers(store, "c", queries)
        store.index_text()
        assert _answers(store, "c", queries) == scanned
    finally:
        store.close()
