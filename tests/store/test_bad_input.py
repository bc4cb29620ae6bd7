"""Bad input to the SQLite store: a file that is not a store, a damaged store, a store of a
newer schema, bad URLs. Each gives a StoreError saying what is wrong, and the file is never
modified (byte for byte)."""

from __future__ import annotations

import hashlib
import math
import os
import sqlite3
from pathlib import Path

import pytest

from treadle.errors import TreeError
from treadle.events.json_limits import MAX_INT_DIGITS, MAX_JSON_DEPTH, JsonLimitError
from treadle.events.model import MessageEvent, ObservationEvent
from treadle.store.base import ConversationNotFound, StoreError
from treadle.store.sqlite import SqliteEventStore, schema_version
from treadle.store.urls import open_store


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_store(path: Path, events: int = 300) -> None:
    """A real store with events, closed cleanly (everything checkpointed into the file)."""
    store = open_store(f"sqlite:///{path}")
    store.create_conversation("c")
    store.append_batch("c", [MessageEvent(source="user", text="x" * 500) for _ in range(events)])
    store.close()
    assert not path.with_name(path.name + "-wal").exists()


def assert_refused(path: Path, *fragments: str) -> StoreError:
    before = digest(path)
    with pytest.raises(StoreError) as caught:
        open_store(f"sqlite:///{path}")
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    assert digest(path) == before, "the refused file was modified"
    assert not path.with_name(path.name + "-wal").exists()
    return caught.value


def test_random_bytes(tmp_path: Path) -> None:
    path = tmp_path / "noise.db"
    path.write_bytes(os.urandom(10_000))
    assert_refused(path, "not a SQLite database", "not modified")


def test_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text('{"id": "e1", "kind": "message"}\n' * 50)
    assert_refused(path, "not a SQLite database")


def test_sqlite_database_of_another_application(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.close()
    assert_refused(path, "another application")


def test_meta_table_of_another_application(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.commit()
    conn.close()
    assert_refused(path, "not a Treadle store")


def _set_meta(path: Path, version: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
    conn.commit()
    conn.close()


def test_newer_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    make_store(path)
    _set_meta(path, str(schema_version() + 1))
    error = assert_refused(path, "newer Treadle", "upgrade Treadle", "not modified")
    assert f"version {schema_version() + 1}" in str(error)


def test_damaged_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "odd.db"
    make_store(path)
    _set_meta(path, "two")
    assert_refused(path, "not a Treadle store")


def test_truncated_store(tmp_path: Path) -> None:
    path = tmp_path / "cut.db"
    make_store(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert_refused(path, "truncated")


def test_truncated_header(tmp_path: Path) -> None:
    path = tmp_path / "cut.db"
    make_store(path)
    path.write_bytes(path.read_bytes()[:60])
    assert_refused(path, "not a SQLite database")


def test_damaged_pages_give_store_errors_not_tracebacks(tmp_path: Path) -> None:
    """Damage past the schema pages is only met when read: reads then raise StoreError, and
    ``integrity_check`` (``treadle store check``) reports it."""
    path = tmp_path / "damaged.db"
    make_store(path, events=2000)
    data = bytearray(path.read_bytes())
    page = 4096
    for start in range(len(data) // 2, len(data) // 2 + 8 * page, page):
        data[start : start + page] = os.urandom(page)  # overwrite whole pages in the middle
    path.write_bytes(bytes(data))
    store = SqliteEventStore(path)
    try:
        assert store.integrity_check() != []
        with pytest.raises(StoreError, match="damaged"):
            store.get_range("c", 0, 10**9)
    finally:
        store.close()


def test_damaged_payload_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "payload.db"
    make_store(path, events=3)
    conn = sqlite3.connect(path)
    conn.execute('UPDATE events SET payload = \'{"kind": "message", "id": 3\' WHERE seq = 1')
    conn.commit()
    conn.close()
    store = SqliteEventStore(path)
    try:
        assert store.get_range("c", 0, 1)[0].seq == 0
        with pytest.raises(StoreError, match="seq 1 cannot be read back"):
            store.get_range("c", 0, 3)
    finally:
        store.close()


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    assert not (tmp_path / "no").exists()


def test_a_directory_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "folder.db").mkdir()
    with pytest.raises(StoreError):
        open_store(f"sqlite:///{tmp_path / 'folder.db'}")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "empty"),
        ("sqlite://", "no file path"),
        ("sqlite:///", "no file path"),
        ("sqlite://host/file.db", "host"),
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite:///x.db?durability=sometimes", "durability"),
        ("sqlite:///x.db?journal=off", "unknown option"),
        ("mysql://user@host/db", "unknown scheme"),
        ("/just/a/path.db", "no scheme"),
    ],
)
def test_bad_urls_say_what_is_accepted(tmp_path: Path, monkeypatch, url: str, problem: str):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError) as caught:
        open_store(url)
    assert problem in str(caught.value)
    if problem != "durability":
        assert "sqlite:////absolute/path.db" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_parent_link_pointing_forward_is_a_cycle_not_a_hang(tmp_path: Path) -> None:
    """TREE-CYCLE cannot arise from appends; a file edited behind the store's back must still
    not make a path walk loop."""
    path = tmp_path / "loop.db"
    store = open_store(f"sqlite:///{path}")
    store.create_conversation("c")
    root = MessageEvent(id="r", source="user", text="r", parent_id="__root__")
    a = MessageEvent(id="a", source="user", text="a", parent_id="r")
    b = MessageEvent(id="b", source="user", text="b", parent_id="r")  # a fork: a new branch
    store.append_batch("c", [root, a, b])
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET parent_seq = 2 WHERE seq = 2")  # b is its own parent
    conn.commit()
    conn.close()
    store = SqliteEventStore(path)
    try:
        with pytest.raises(TreeError) as caught:
            store.path_to_root("c", "b")
        assert caught.value.contract == "TREE-CYCLE"
    finally:
        store.close()


# -- JSON a store could not read back (issue 10, items 9 and 10) -----------------------------


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def observation(data: dict, **fields: object) -> ObservationEvent:
    return ObservationEvent(action_id="a", tool_call_id="c", tool_name="t", data=data, **fields)


@pytest.mark.parametrize(
    ("make", "field", "words"),
    [
        # the event object, "data", then 199 lists: one level more than the reader takes
        (lambda: observation({"x": nested(MAX_JSON_DEPTH - 1)}), None, "at most 200 levels"),
        (lambda: observation({}, content="half a pair: \ud800"), "content", "lone surrogate"),
        (lambda: observation({"k\udfff": 1}), "data", "lone surrogate"),
        (lambda: MessageEvent(source="user", text="\udc80"), "text", "lone surrogate"),
    ],
)
def test_append_refuses_an_event_it_could_not_read_back(store, make, field, words) -> None:
    store.create_conversation("c")
    good = MessageEvent(source="user", text="before")
    store.append("c", good)
    bad = make()
    with pytest.raises(JsonLimitError) as caught:
        store.append_batch("c", [MessageEvent(source="user", text="same batch"), bad])
    assert caught.value.field == field
    assert words in str(caught.value)
    assert bad.id in str(caught.value)
    assert store.get_conversation("c").event_count == 1  # nothing of the batch was written
    assert [e.id for e in store.path_to_root("c")] == [good.id]  # and the log still reads


def test_what_the_store_takes_at_the_limits_reads_back_identically(store) -> None:
    store.create_conversation("c")
    events = [
        observation({"x": nested(MAX_JSON_DEPTH - 2)}),  # exactly MAX_JSON_DEPTH deep
        observation({"big": 10**MAX_INT_DIGITS - 1, "neg": -(10**MAX_INT_DIGITS - 1)}),
        observation({"tiny": 5e-324, "huge": 1.7e308, "text": "é 😀 \u2028 \x00"}),
    ]
    store.append_batch("c", events)
    assert [s.event for s in store.get_range("c", 0, 3)] == events
    assert store.path_to_root("c") == events


@pytest.mark.parametrize(
    "metadata",
    [{"x": math.nan}, {"x": "\ud800"}, {"x": nested(MAX_JSON_DEPTH)}, {"x": 10**MAX_INT_DIGITS}],
)
def test_metadata_a_store_could_not_read_back_is_refused(store, metadata) -> None:
    with pytest.raises(JsonLimitError, match="metadata"):
        store.create_conversation("c", metadata=metadata)
    with pytest.raises(ConversationNotFound):
        store.get_conversation("c")


@pytest.mark.parametrize(
    ("column", "value"),
    [("metadata", "{not json"), ("metadata", "[1]"), ("created_at", "yesterday")],
)
def test_a_damaged_conversations_row_is_a_store_error_naming_it(
    tmp_path: Path, column: str, value: str
) -> None:
    path = tmp_path / "store.db"
    make_store(path, events=3)
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE conversations SET {column} = ?", (value,))
    conn.close()
    store = open_store(f"sqlite:///{path}")
    try:
        for read in (lambda: store.get_conversation("c"), lambda: store.list_conversations()):
            with pytest.raises(StoreError, match=f"conversation 'c' has a bad {column}"):
                read()
    finally:
        store.close()
