"""The tree index: TREE-PARENT resolution, paths and windows, heads, named errors."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from treadle.errors import TreeError
from treadle.events.model import ROOT, MessageEvent, StateChangeEvent
from treadle.events.tree import EventTree


def msg(event_id, parent=None, source="user"):
    return MessageEvent(id=event_id, source=source, text=event_id, parent_id=parent)


def ids(events):
    return [event.id for event in events]


def test_seed_example_1_sibling_branch_never_leaks():
    tree = EventTree([msg("root", ROOT), msg("a", "root"), msg("old", "a"), msg("new", "a")])
    assert ids(tree.path_to_root("new")) == ["root", "a", "new"]
    assert ids(tree.path_to_root("old")) == ["root", "a", "old"]
    assert tree.heads() == ["old", "new"]
    assert tree.branch_points() == ["a"]


def test_legacy_absent_parent_is_previous_event_and_root_marker_starts_a_tree():
    events = [msg("a"), msg("b"), msg("c", ROOT), msg("d")]
    tree = EventTree(events)
    assert ids(tree.path_to_root("b")) == ["a", "b"]
    assert ids(tree.path_to_root("d")) == ["c", "d"]
    assert [e.id for e in tree.roots()] == ["a", "c"]
    assert tree.effective_parent_id("a") is None
    assert tree.effective_parent_id("d") == "c"


def test_limit_returns_the_last_k():
    events = [msg(f"e{i}") for i in range(10)]
    tree = EventTree(events)
    assert ids(tree.path_to_root("e9", limit=3)) == ["e7", "e8", "e9"]
    assert tree.path_to_root("e9", limit=0) == []
    assert len(tree.path_to_root("e9", limit=50)) == 10


def test_cycle_is_named():
    tree = EventTree([msg("root", ROOT), msg("p", "q"), msg("q", "p")])
    with pytest.raises(TreeError) as caught:
        tree.path_to_root("q")
    assert caught.value.contract == "TREE-CYCLE"
    assert caught.value.event_ids[0] in {"p", "q"}


def test_missing_parent_is_named():
    tree = EventTree([msg("root", ROOT), msg("b", "ghost")])
    with pytest.raises(TreeError) as caught:
        tree.path_to_root("b")
    assert caught.value.contract == "TREE-MISSING"
    assert caught.value.event_ids == ("b", "ghost")


def test_unknown_head_is_named():
    with pytest.raises(TreeError) as caught:
        EventTree([msg("a")]).path_to_root("zzz")
    assert caught.value.contract == "TREE-HEAD"


def test_state_changes_are_side_leaves_never_heads():
    events = [
        msg("a"),
        msg("b", "a"),
        StateChangeEvent(id="s", key="status", value="idle", parent_id="b"),
    ]
    tree = EventTree(events)
    assert tree.heads() == ["b"]
    assert tree.default_head() == "b"
    assert not tree.lags("b")
    assert tree.lags("a")
    assert ids(tree.children("b")) == ["s"]


def test_timestamps_never_decide_parentage():
    late = MessageEvent(id="x", source="user", text="x", timestamp="2030-01-01T00:00:00+00:00")
    early = MessageEvent(id="y", source="user", text="y", timestamp="2000-01-01T00:00:00+00:00")
    assert ids(EventTree([late, early]).path_to_root("y")) == ["x", "y"]


@st.composite
def random_trees(draw):
    """Append-ordered logs whose parents are earlier events, the root marker, or absent."""
    size = draw(st.integers(min_value=1, max_value=60))
    events = []
    for i in range(size):
        choice = (
            draw(st.integers(min_value=-2, max_value=i - 1))
            if i
            else draw(st.sampled_from([-2, -1]))
        )
        parent = None if choice == -2 else ROOT if choice == -1 else f"e{choice}"
        events.append(msg(f"e{i}", parent))
    return events


def naive_path(events, head):
    by_id = {e.id: (i, e) for i, e in enumerate(events)}
    chain = []
    current = head
    while current is not None:
        i, event = by_id[current]
        chain.append(event.id)
        if event.parent_id == ROOT:
            current = None
        elif event.parent_id is None:
            current = events[i - 1].id if i else None
        else:
            current = event.parent_id
    return list(reversed(chain))


@given(random_trees(), st.data())
def test_path_equals_a_naive_walk_and_limit_is_its_tail(events, data):
    tree = EventTree(events)
    head = data.draw(st.sampled_from(events)).id
    k = data.draw(st.integers(min_value=0, max_value=70))
    full = naive_path(events, head)
    assert ids(tree.path_to_root(head)) == full
    assert ids(tree.path_to_root(head, limit=k)) == (full[-k:] if k else [])
