"""An append that names the head it continues (``expect_head``), on every backend: stored when
the head is that event, refused with HeadMoved and nothing stored when another writer moved it
(an append of another store, a head set, a branch made), whichever way the backend plans it."""

from __future__ import annotations

import pytest

from treadle.events.model import ROOT, Event, MessageEvent, StateChangeEvent
from treadle.store.base import HeadMoved
from treadle.store.urls import open_store


def msg(event_id: str, parent: str) -> Event:
    return MessageEvent(id=event_id, parent_id=parent, source="user", text=event_id)


def fact(event_id: str, parent: str) -> Event:
    return StateChangeEvent(id=event_id, parent_id=parent, key="status", value="running")


def _unchanged(store, conversation_id: str, count: int, head: str | None) -> None:
    assert store.event_count(conversation_id) == count
    assert store.head(conversation_id) == head


def test_an_append_onto_the_expected_head_is_stored(store):
    cid = store.create_conversation("c").id
    store.append_batch(cid, [msg("a", ROOT)], expect_head=ROOT)
    store.append_batch(cid, [msg("b", "a"), msg("c", "b")], expect_head="a")
    store.append(cid, fact("f", "c"), move_head=False)  # a side leaf moves no head
    assert store.append_batch(cid, [msg("d", "c")], expect_head="c") == [4]
    assert store.head(cid) == "d"


def test_an_append_onto_a_moved_head_is_refused_whole(store):
    cid = store.create_conversation("c").id
    store.append_batch(cid, [msg("a", ROOT), msg("b", "a")])
    with pytest.raises(HeadMoved) as refused:
        store.append_batch(cid, [msg("x", "a"), msg("y", "x")], expect_head="a")
    assert (refused.value.expected, refused.value.found) == ("a", "b")
    assert "another writer moved it" in str(refused.value)
    _unchanged(store, cid, 2, "b")
    with pytest.raises(HeadMoved):
        store.append_batch(cid, [msg("z", ROOT)], expect_head=ROOT)  # it has a head
    _unchanged(store, cid, 2, "b")


def test_a_head_moved_by_another_store_is_seen(store_url):
    """The second store's append (or head set) comes between two of the first's: the first
    planned its next append from its own last one (PostgreSQL's one-round-trip path)."""
    first, second = open_store(store_url), open_store(store_url)
    try:
        cid = first.create_conversation("c").id
        first.append_batch(cid, [msg("a", ROOT)], expect_head=ROOT)
        first.append_batch(cid, [msg("b", "a")], expect_head="a")
        second.append_batch(cid, [msg("c", "b")])
        with pytest.raises(HeadMoved):
            first.append_batch(cid, [msg("x", "b")], expect_head="b")
        _unchanged(first, cid, 3, "c")
        first.append_batch(cid, [msg("d", "c")], expect_head="c")
        second.set_head(cid, "a")  # no event appended: the count alone does not tell
        with pytest.raises(HeadMoved):
            first.append_batch(cid, [msg("y", "d")], expect_head="d")
        _unchanged(first, cid, 4, "a")
        first.append_batch(cid, [msg("e", "a")], expect_head="a")  # a branch from a
        assert first.head(cid) == "e"
    finally:
        first.close()
        second.close()


def test_without_expect_head_an_append_goes_where_its_parent_says(store):
    cid = store.create_conversation("c").id
    store.append_batch(cid, [msg("a", ROOT), msg("b", "a")])
    store.append_batch(cid, [msg("x", "a")])  # a branch, as before: no head is checked
    assert store.head(cid) == "x"
