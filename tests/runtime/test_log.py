"""``ConversationLog``: appends chained onto the head, the active path cached but following a
head another writer moved, status and side records beside the head, callbacks told after the
store has the event (a failing one never stops the write)."""

from __future__ import annotations

import pytest

from treadle.events.json_limits import JsonLimitError
from treadle.events.model import ROOT, MessageEvent
from treadle.runtime.log import ConversationLog
from treadle.runtime.status import ConversationStatus as Status


def test_appends_chain_onto_the_head_and_callbacks_hear_of_stored_events(store):
    store.create_conversation("c")
    heard: list[tuple[int, str, bool]] = []

    def listener(stored) -> None:
        stored_now = store.get_event("c", stored.event.id).seq == stored.seq
        heard.append((stored.seq, stored.event.id, stored_now))

    def broken(_stored) -> None:
        raise RuntimeError("a listener that fails")

    log = ConversationLog(store, "c", [broken, listener])
    first, second = log.append([MessageEvent(source="user", text=t) for t in ("a", "b")])
    (third,) = log.append([MessageEvent(source="user", text="c")])
    assert (first.parent_id, second.parent_id, third.parent_id) == (ROOT, first.id, second.id)
    assert log.head == third.id
    assert [e.id for e in log.path()] == [first.id, second.id, third.id]
    log.record_status(Status.RUNNING, "going")
    log.record_fact("pause_request", {"kind": "pause"})
    assert log.head == third.id  # side records never move the head
    assert log.read_status() == (Status.RUNNING, "going")
    assert [seq for seq, _id, _stored in heard] == [0, 1, 2, 3, 4]
    assert all(stored_now for _seq, _id, stored_now in heard)
    assert log.last_seq() == 4


def test_the_cached_path_follows_a_head_another_writer_moved(store):
    store.create_conversation("c")
    mine, theirs = ConversationLog(store, "c"), ConversationLog(store, "c")
    first, second = mine.append([MessageEvent(source="user", text=t) for t in ("a", "b")])
    assert [e.id for e in theirs.path()] == [first.id, second.id]
    (other,) = theirs.append([MessageEvent(source="user", text="from another process")])
    assert [e.id for e in mine.path()] == [first.id, second.id, other.id]
    mine.move_head(first.id)  # a branch switch: the next append branches off ``first``
    (branch,) = mine.append([MessageEvent(source="user", text="a branch")])
    assert branch.parent_id == first.id
    assert [e.id for e in theirs.path()] == [first.id, branch.id]


def _counting_heads(store) -> list[str]:
    asked: list[str] = []
    head = store.head

    def counted(conversation_id):
        asked.append(conversation_id)
        return head(conversation_id)

    store.head = counted
    return asked


def test_while_its_writer_works_the_log_reads_the_head_once(store):
    store.create_conversation("c")
    log = ConversationLog(store, "c")
    asked = _counting_heads(store)
    with log.keeping_head():
        for text in ("a", "b", "c"):
            log.append([MessageEvent(source="user", text=text)])
            log.record_fact("budget", {"max_total_tokens": {"from": 1, "to": 2}})
            log.record_status(Status.RUNNING)
            assert len(log.path()) == ord(text) - ord("a") + 1
        log.move_head(log.path()[0].id)
        assert log.head == log.path()[-1].id
    assert len(asked) == 1
    log.head  # noqa: B018 - outside the scope every read asks the store
    assert len(asked) == 2


def test_a_kept_head_another_writer_moved_is_read_again_at_the_next_append(store):
    """The append names the head it continues: refused by the store (HeadMoved, nothing
    stored), it chains onto the head read afresh, as an append right after a read does."""
    store.create_conversation("c")
    mine, theirs = ConversationLog(store, "c"), ConversationLog(store, "c")
    with mine.keeping_head():
        (first,) = mine.append([MessageEvent(source="user", text="a")])
        (other,) = theirs.append([MessageEvent(source="user", text="another writer's")])
        (second,) = mine.append([MessageEvent(source="user", text="b")])
        assert second.parent_id == other.id
        assert [e.id for e in mine.path()] == [first.id, other.id, second.id]
        theirs.move_head(first.id)  # moved without an event on the path
        (third,) = mine.append([MessageEvent(source="user", text="c")])
        assert third.parent_id == first.id
    assert store.event_count("c") == 5  # a, other, b, the head fact, c: nothing twice or lost
    assert store.head("c") == third.id


def test_written_here_names_only_what_this_log_wrote(store):
    store.create_conversation("c")
    mine, theirs = ConversationLog(store, "c"), ConversationLog(store, "c")
    mine.append([MessageEvent(source="user", text="a")])  # seq 0
    mine.record_status(Status.RUNNING)  # seq 1
    assert mine.written_here(-1, 1)
    assert mine.written_here(1, 1)  # nothing after 1
    theirs.record_status(Status.RUNNING)  # seq 2, another writer's
    mine.record_status(Status.RUNNING)  # seq 3
    assert not mine.written_here(1, 3)
    assert mine.written_here(2, 3)
    mine.record_fact("pause_request", {"kind": "pause"})  # seq 4: a request, to be read
    assert not mine.written_here(3, 4)
    assert not theirs.written_here(-1, 3)


def test_a_fact_riding_along_is_stored_with_the_writers_next_write(store):
    """While the head is kept, a ``ride_along`` fact waits for the next append and is stored in
    its batch, before its events: the seqs and the tree two appends would give, callbacks
    told once stored; facts left riding are stored as the writer stops working."""
    store.create_conversation("c")
    heard: list[tuple[int, str]] = []
    log = ConversationLog(store, "c", [lambda stored: heard.append((stored.seq, stored.event.id))])
    (first,) = log.append([MessageEvent(source="user", text="a")])
    with log.keeping_head():
        log.record_fact("snapshot", {"id": "s1", "after_event": first.id}, ride_along=True)
        assert store.event_count("c") == 1  # waiting
        assert heard == [(0, first.id)]
        (second,) = log.append([MessageEvent(source="agent", text="b")])
        stored = store.get_range("c", 0, 10)
        assert [s.event.kind for s in stored] == ["message", "state_change", "message"]
        fact = stored[1].event
        assert (fact.parent_id, second.parent_id) == (first.id, first.id)  # both under a
        assert log.head == second.id == store.head("c")  # the fact never moves the head
        assert [seq for seq, _ in heard] == [0, 1, 2]
        assert log.written_here(0, 2)
        log.record_fact("snapshot", {"id": "s2", "after_event": second.id}, ride_along=True)
        log.record_status(Status.RUNNING)  # a status takes it along too
        assert [s.event.kind for s in store.get_range("c", 3, 10)] == ["state_change"] * 2
        log.record_fact("snapshot", {"id": "s3", "after_event": second.id}, ride_along=True)
    assert store.event_count("c") == 6  # the writer stopped: stored on its own
    assert heard[-1][0] == 5
    # not kept: stored at once
    log.record_fact("snapshot", {"id": "s4", "after_event": second.id}, ride_along=True)
    assert store.event_count("c") == 7


def test_a_riding_fact_the_store_could_not_read_back_is_refused_when_recorded(store):
    store.create_conversation("c")
    log = ConversationLog(store, "c")
    (first,) = log.append([MessageEvent(source="user", text="a")])
    with log.keeping_head():
        bad = {"id": "s1", "after_event": first.id, "changed": ["bad-\udcff-name"]}
        with pytest.raises(JsonLimitError, match="lone surrogate"):
            log.record_fact("snapshot", bad, ride_along=True)
        (second,) = log.append([MessageEvent(source="agent", text="b")])  # not poisoned
    assert [s.event.id for s in store.get_range("c", 0, 10)] == [first.id, second.id]
