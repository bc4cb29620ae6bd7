"""``ConversationLog``: appends chained onto the head, the active path cached but following a
head another writer moved, status and side records beside the head, callbacks told after the
store has the event (a failing one never stops the write)."""

from __future__ import annotations

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
