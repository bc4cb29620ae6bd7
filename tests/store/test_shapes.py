"""``shapes``: the tree read from the store's index columns equals the tree of the events."""

from __future__ import annotations

from treadle.events.model import ROOT, MessageEvent, StateChangeEvent
from treadle.events.tree import EventTree
from treadle.store.base import EventStore


def test_shapes_give_the_same_tree_as_the_events(store: EventStore) -> None:
    conv = store.create_conversation().id
    events = [
        MessageEvent(id="a", source="user", text="a"),  # legacy first: a root
        MessageEvent(id="b", source="agent", text="b"),  # legacy: child of a
        MessageEvent(id="c", source="user", text="c", parent_id="a"),  # a branch at a
        StateChangeEvent(id="s", key="status", value={"status": "idle"}, parent_id="c"),
        MessageEvent(id="d", source="user", text="d", parent_id=ROOT),  # a second tree
        MessageEvent(id="e", source="agent", text="e", parent_id="b"),
    ]
    store.append_batch(conv, events)
    shapes = store.shapes(conv)
    assert [(s.seq, s.id, s.parent_id, s.kind) for s in shapes] == [
        (0, "a", ROOT, "message"),
        (1, "b", "a", "message"),
        (2, "c", "a", "message"),
        (3, "s", "c", "state_change"),
        (4, "d", ROOT, "message"),
        (5, "e", "b", "message"),
    ]
    from_events, from_shapes = EventTree(events), EventTree(shapes)
    assert from_shapes.heads() == from_events.heads() == ["c", "d", "e"]
    assert from_shapes.branch_points() == from_events.branch_points() == ["a"]
    for event in events:
        assert [c.id for c in from_shapes.children(event.id)] == [
            c.id for c in from_events.children(event.id)
        ]
    assert store.shapes(store.create_conversation().id) == []
