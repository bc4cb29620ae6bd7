"""The EventStore contract (docs/contracts.md: APPEND and TREE), run against every backend.

Backend-neutral: only the ``EventStore`` protocol is used, and results are compared with the
pure core (``EventTree``) or with a plain-Python filter over the events.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import wait

import pytest

from support.store_workers import append_messages
from treadle.errors import AppendError
from treadle.events.model import (
    ROOT,
    ActionEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    StateChangeEvent,
)
from treadle.events.tree import EventTree
from treadle.store.base import (
    ConversationExists,
    ConversationNotFound,
    EventNotFound,
    EventQuery,
    EventStore,
    StoredEvent,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def msg(event_id: str, parent: str | None = None, *, source: str = "user", text: str = "") -> Event:
    return MessageEvent(id=event_id, parent_id=parent, source=source, text=text or event_id)


def state(event_id: str, parent: str | None = None) -> Event:
    return StateChangeEvent(id=event_id, parent_id=parent, key="status", value="running")


def ids(events) -> list[str]:
    return [(e.event if isinstance(e, StoredEvent) else e).id for e in events]


@pytest.fixture
def conv(store: EventStore) -> str:
    return store.create_conversation("c").id


def test_backend_implements_the_protocol(store: EventStore) -> None:
    assert isinstance(store, EventStore)
    assert store.url


# -- conversations ---------------------------------------------------------------------------


def test_create_and_get_round_trip_metadata(store: EventStore) -> None:
    metadata = {"model": "m", "settings": {"confirm": "risky", "tools": ["a", "b"]}, "é": 1.5}
    info = store.create_conversation("conv-1", title="Fix the parser", metadata=metadata)
    assert (info.id, info.title, info.metadata) == ("conv-1", "Fix the parser", metadata)
    assert (info.event_count, info.head_id) == (0, None)
    assert info.created_at.tzinfo is not None
    assert store.get_conversation("conv-1") == info


def test_create_without_id_gives_a_fresh_one(store: EventStore) -> None:
    first, second = store.create_conversation(), store.create_conversation()
    assert first.id
    assert second.id
    assert first.id != second.id
    assert first.metadata == {}
    assert first.title is None


def test_create_twice_is_refused(store: EventStore) -> None:
    store.create_conversation("same", title="first")
    with pytest.raises(ConversationExists):
        store.create_conversation("same", title="second")
    assert store.get_conversation("same").title == "first"


def test_unknown_conversation_is_refused_everywhere(store: EventStore) -> None:
    with pytest.raises(ConversationNotFound):
        store.get_conversation("nope")
    with pytest.raises(ConversationNotFound):
        store.append("nope", msg("a"))
    with pytest.raises(ConversationNotFound):
        store.head("nope")
    with pytest.raises(ConversationNotFound):
        store.event_count("nope")
    with pytest.raises(ConversationNotFound):
        store.path_to_root("nope")
    with pytest.raises(ConversationNotFound):
        store.search("nope", EventQuery())
    with pytest.raises(ConversationNotFound):
        store.count("nope", EventQuery())
    with pytest.raises(ConversationNotFound):
        store.get_range("nope", 0, 10)
    with pytest.raises(ConversationNotFound):
        store.subscribe("nope")  # at the call, not at the first next()
    with pytest.raises(ConversationNotFound):
        store.update_conversation("nope", title="x")
    with pytest.raises(ConversationNotFound):
        store.delete_conversation("nope")


def test_list_is_in_creation_order_with_paging(store: EventStore) -> None:
    for name in ["b", "a", "c", "e", "d"]:
        store.create_conversation(name)
    assert [c.id for c in store.list_conversations()] == ["b", "a", "c", "e", "d"]
    assert [c.id for c in store.list_conversations(limit=2, offset=1)] == ["a", "c"]
    assert store.list_conversations(offset=5) == []


def test_update_title_keeps_metadata_and_metadata_replaces(store: EventStore) -> None:
    created = store.create_conversation("c", title="old", metadata={"a": 1, "b": 2})
    renamed = store.update_conversation("c", title="new")
    assert (renamed.title, renamed.metadata) == ("new", {"a": 1, "b": 2})
    assert renamed.updated_at >= created.updated_at
    replaced = store.update_conversation("c", metadata={"origin": {"import": "openhands"}})
    assert (replaced.title, replaced.metadata) == ("new", {"origin": {"import": "openhands"}})
    assert store.get_conversation("c") == replaced


def test_metadata_must_be_a_json_object(store: EventStore) -> None:
    with pytest.raises((TypeError, ValueError)):
        store.create_conversation("c", metadata={"x": object()})
    with pytest.raises(ConversationNotFound):
        store.get_conversation("c")


def test_delete_removes_events_and_keeps_others(store: EventStore) -> None:
    store.create_conversation("gone")
    store.create_conversation("kept")
    store.append_batch("gone", [msg("a"), msg("b")])
    store.append_batch("kept", [msg("a"), msg("b")])
    store.delete_conversation("gone")
    with pytest.raises(ConversationNotFound):
        store.get_conversation("gone")
    assert [c.id for c in store.list_conversations()] == ["kept"]
    assert ids(store.get_range("kept", 0, 10)) == ["a", "b"]
    # the id is free again, and its log starts empty from seq 0
    store.create_conversation("gone")
    assert store.get_range("gone", 0, 10) == []
    assert store.append("gone", msg("a")) == 0


# -- APPEND ----------------------------------------------------------------------------------


def test_seq_is_gap_free_from_zero_per_conversation(store: EventStore, conv: str) -> None:
    store.create_conversation("other")
    assert store.append(conv, msg("a")) == 0
    assert store.append_batch(conv, [msg("b"), msg("c"), msg("d")]) == [1, 2, 3]
    assert store.append_batch(conv, []) == []
    assert store.append(conv, msg("e")) == 4
    assert store.append("other", msg("a")) == 0  # same id, other conversation: fine
    stored = store.get_range(conv, 0, 100)
    assert [s.seq for s in stored] == [0, 1, 2, 3, 4]
    assert store.get_conversation(conv).event_count == 5
    assert (store.event_count(conv), store.event_count("other")) == (5, 1)


def test_event_counts_of_many_conversations_in_one_read(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg("a"), msg("b")])
    many = [store.create_conversation(f"m{n}").id for n in range(600)]  # past a chunk's size
    store.append(many[-1], msg("x"))
    counts = store.event_counts([conv, *many, "nowhere", conv])
    assert counts == {conv: 2, **dict.fromkeys(many[:-1], 0), many[-1]: 1}  # missing: left out
    assert store.event_counts([]) == {}


def test_stored_events_read_back_equal(store: EventStore, conv: str) -> None:
    action = ActionEvent(
        id="act",
        parent_id=ROOT,
        llm_response_id="r",
        tool_call_id="c1",
        tool_name="terminal",
        arguments={"command": "ls -la", "nested": [1, {"x": None}]},
        raw_arguments='{"command": "ls -la", "nested": [1, {"x": null}]}',
        thought="look around — ünïcode",
        extra={"unknown_field": [1, 2]},
    )
    legacy = msg("legacy")  # absent parent stays absent: "empty" is not "root"
    store.append_batch(conv, [action, legacy])
    assert store.get_event(conv, "act") == StoredEvent(0, action)
    assert store.get_event(conv, "legacy") == StoredEvent(1, legacy)
    assert store.get_event(conv, "legacy").event.parent_id is None


def _assert_nothing_written(store: EventStore, conv: str, count: int, head: str | None) -> None:
    info = store.get_conversation(conv)
    assert (info.event_count, info.head_id) == (count, head)
    assert len(store.get_range(conv, 0, 1000)) == count


def test_duplicate_id_is_refused(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg("a"), msg("b")])
    with pytest.raises(AppendError) as caught:
        store.append(conv, msg("a", "b"))
    assert caught.value.contract == "APPEND-DUP-ID"
    assert "a" in caught.value.event_ids
    _assert_nothing_written(store, conv, 2, "b")
    assert store.append(conv, msg("c")) == 2  # the refused append used no seq


def test_duplicate_inside_a_batch_refuses_the_whole_batch(store: EventStore, conv: str) -> None:
    store.append(conv, msg("a"))
    with pytest.raises(AppendError) as caught:
        store.append_batch(conv, [msg("x"), msg("y"), msg("x")])
    assert caught.value.contract == "APPEND-DUP-ID"
    _assert_nothing_written(store, conv, 1, "a")


def test_missing_parent_is_refused(store: EventStore, conv: str) -> None:
    store.append(conv, msg("a"))
    with pytest.raises(AppendError) as caught:
        store.append(conv, msg("b", "ghost"))
    assert caught.value.contract == "APPEND-NO-PARENT"
    assert set(caught.value.event_ids) >= {"b", "ghost"}
    _assert_nothing_written(store, conv, 1, "a")


def test_missing_parent_in_a_batch_refuses_the_whole_batch(store: EventStore, conv: str) -> None:
    store.append(conv, msg("a"))
    # a parent later in the same batch does not exist yet when its child is appended
    batch = [msg("b", "a"), msg("c", "d"), msg("d", "b")]
    with pytest.raises(AppendError) as caught:
        store.append_batch(conv, batch)
    assert caught.value.contract == "APPEND-NO-PARENT"
    _assert_nothing_written(store, conv, 1, "a")
    assert store.append_batch(conv, [msg("b", "a"), msg("d", "b"), msg("c", "d")]) == [1, 2, 3]


def test_parent_of_another_conversation_is_missing(store: EventStore, conv: str) -> None:
    store.create_conversation("other")
    store.append("other", msg("elsewhere"))
    with pytest.raises(AppendError) as caught:
        store.append(conv, msg("a", "elsewhere"))
    assert caught.value.contract == "APPEND-NO-PARENT"


def test_parent_cannot_be_the_event_itself(store: EventStore, conv: str) -> None:
    with pytest.raises(AppendError) as caught:
        store.append(conv, msg("self", "self"))
    assert caught.value.contract == "APPEND-NO-PARENT"


def test_legacy_absent_parent_is_the_event_appended_just_before(
    store: EventStore, conv: str
) -> None:
    store.append(conv, msg("first"))  # first and absent: a root
    store.append(conv, msg("a", "first"))
    store.append(conv, msg("b", "first"))  # a sibling of a
    store.append(conv, msg("x"))  # absent: the previous event (b), not the head's chain
    store.append(conv, msg("y", "a"))
    store.append_batch(conv, [msg("z"), msg("w")])  # z -> y, w -> z
    assert ids(store.path_to_root(conv, "x")) == ["first", "b", "x"]
    assert ids(store.path_to_root(conv, "w")) == ["first", "a", "y", "z", "w"]
    assert ids(store.path_to_root(conv, "first")) == ["first"]


def test_legacy_parent_follows_a_state_change_like_any_event(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg("a"), state("s"), msg("b")])
    assert ids(store.path_to_root(conv, "b")) == ["a", "s", "b"]


def test_root_marker_starts_a_new_root(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg("a"), msg("b"), msg("r2", ROOT), msg("c")])
    assert ids(store.path_to_root(conv, "r2")) == ["r2"]
    assert ids(store.path_to_root(conv, "c")) == ["r2", "c"]
    assert ids(store.path_to_root(conv, "b")) == ["a", "b"]


# -- head ------------------------------------------------------------------------------------


def test_head_moves_with_each_append_except_state_changes(store: EventStore, conv: str) -> None:
    assert store.head(conv) is None
    store.append(conv, msg("a"))
    assert store.head(conv) == "a"
    store.append(conv, state("s1"))
    assert store.head(conv) == "a"
    store.append(conv, msg("b", "a"), move_head=False)
    assert store.head(conv) == "a"
    store.append_batch(conv, [msg("c", "a"), msg("d", "c"), state("s2", "d")])
    assert store.head(conv) == "d"
    store.append_batch(conv, [state("s3", "d")])
    assert store.head(conv) == "d"
    store.append_batch(conv, [msg("e", "d"), msg("f", "e")], move_head=False)
    assert store.head(conv) == "d"
    assert store.get_conversation(conv).head_id == "d"
    assert ids(store.path_to_root(conv)) == ["a", "c", "d"]


def test_set_head(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg("root"), msg("a", "root"), msg("old", "a"), msg("new", "a")])
    store.set_head(conv, "old")
    assert store.head(conv) == "old"
    assert ids(store.path_to_root(conv)) == ["root", "a", "old"]
    with pytest.raises(EventNotFound):
        store.set_head(conv, "ghost")
    assert store.head(conv) == "old"
    store.set_head(conv, None)
    assert store.head(conv) is None
    assert store.path_to_root(conv) == []
    with pytest.raises(ConversationNotFound):
        store.set_head("nope", "a")


def test_a_reader_never_sees_a_head_before_its_event(store: EventStore, conv: str) -> None:
    """The head and the events are written in one transaction (APPEND step 3)."""
    store.append(conv, msg("e0"))
    stop = threading.Event()
    problems: list[str] = []

    def read() -> None:
        while not stop.is_set():
            info = store.get_conversation(conv)
            try:
                seq = store.get_event(conv, info.head_id).seq
            except EventNotFound:
                problems.append(f"head {info.head_id} is not stored")
                continue
            if seq >= store.get_conversation(conv).event_count:
                problems.append(f"head at seq {seq} beyond the count")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for index in range(1, 150):
            if index % 3:
                store.append(conv, msg(f"e{index}"))
            else:
                store.append_batch(conv, [msg(f"e{index}"), msg(f"e{index}b"), state(f"s{index}")])
    finally:
        stop.set()
        reader.join()
    assert problems == []


# -- TREE: paths -----------------------------------------------------------------------------


def test_seed_worked_example_1(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg("root", ROOT), msg("a", "root"), msg("old", "a")])
    store.append(conv, msg("new", "a"))
    assert ids(store.path_to_root(conv)) == ["root", "a", "new"]
    assert ids(store.path_to_root(conv, "old")) == ["root", "a", "old"]


def test_path_window(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg(f"e{i}") for i in range(10)])
    assert ids(store.path_to_root(conv, limit=3)) == ["e7", "e8", "e9"]
    assert ids(store.path_to_root(conv, "e4", limit=2)) == ["e3", "e4"]
    assert store.path_to_root(conv, limit=0) == []
    assert len(store.path_to_root(conv, limit=50)) == 10
    with pytest.raises(ValueError, match="limit"):
        store.path_to_root(conv, limit=-1)


def test_path_of_missing_head_and_of_empty_conversation(store: EventStore, conv: str) -> None:
    assert store.path_to_root(conv) == []
    store.append(conv, msg("a"))
    with pytest.raises(EventNotFound):
        store.path_to_root(conv, "ghost")
    with pytest.raises(EventNotFound):
        store.path_to_root(conv, "ghost", limit=0)


def random_log(rng: random.Random, size: int) -> list[Event]:
    """Events with parents of every meaning: explicit (recent or old), legacy, new roots."""
    events: list[Event] = []
    for index in range(size):
        roll = rng.random()
        if not events or roll < 0.03:
            parent: str | None = ROOT if events and roll < 0.015 else None
        elif roll < 0.25:
            parent = None
        elif roll < 0.65:
            parent = events[-1].id
        elif roll < 0.85:
            parent = events[rng.randrange(max(0, len(events) - 5), len(events))].id
        else:
            parent = rng.choice(events).id
        source = "agent" if index % 3 else "user"
        event = (
            state(f"s{index}", parent) if roll > 0.97 else msg(f"e{index}", parent, source=source)
        )
        events.append(event)
    return events


def append_in_random_batches(store: EventStore, conv: str, events, rng: random.Random) -> None:
    position = 0
    while position < len(events):
        size = rng.choice([1, 1, 1, 2, 5])
        store.append_batch(conv, events[position : position + size])
        position += size


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_paths_agree_with_the_core_tree(store: EventStore, conv: str, seed: int) -> None:
    rng = random.Random(seed)
    events = random_log(rng, 300)
    append_in_random_batches(store, conv, events, rng)
    tree = EventTree(events)
    for event in rng.sample(events, 60):
        expected = ids(tree.path_to_root(event.id))
        assert ids(store.path_to_root(conv, event.id)) == expected, event.id
        limit = rng.choice([1, 2, 7, 40])
        assert ids(store.path_to_root(conv, event.id, limit=limit)) == expected[-limit:]


def test_get_event_and_range(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg(f"e{i}") for i in range(6)])
    assert store.get_event(conv, "e3").seq == 3
    with pytest.raises(EventNotFound):
        store.get_event(conv, "ghost")
    assert ids(store.get_range(conv, 2, 5)) == ["e2", "e3", "e4"]  # [start, end)
    assert ids(store.get_range(conv, 4, 100)) == ["e4", "e5"]
    assert store.get_range(conv, 3, 3) == []
    assert store.get_range(conv, 6, 9) == []


# -- search and count ------------------------------------------------------------------------


def search_log() -> list[Event]:
    """Two branches from one fork, every kind and source, distinct times, some unicode."""
    events: list[Event] = []

    def add(event: Event) -> Event:
        events.append(event)
        return event

    root = add(msg("root", ROOT, text="Start here"))
    parent = root.id
    for turn in range(12):
        action = add(
            ActionEvent(
                id=f"a{turn}",
                parent_id=parent,
                llm_response_id=f"r{turn}",
                tool_call_id=f"call{turn}",
                tool_name="terminal",
                raw_arguments="{}",
                thought="Grüße from the AGENT" if turn % 4 == 0 else "",
            )
        )
        result = add(
            ObservationEvent(
                id=f"o{turn}",
                parent_id=action.id,
                action_id=action.id,
                tool_call_id=action.tool_call_id,
                tool_name="terminal",
                content=f"output {turn} NEEDLE" if turn % 5 == 0 else f"output {turn}",
            )
        )
        parent = result.id
        if turn == 5:
            fork = parent
        if turn % 3 == 2:
            add(state(f"s{turn}", parent))
    sibling = fork
    for index in range(6):
        sibling = add(msg(f"side{index}", sibling, source="agent", text=f"retry needle {index}")).id
    stamped = []
    for index, event in enumerate(events):
        moment = T0 + timedelta(minutes=index)
        stamped.append(event.model_copy(update={"timestamp": moment.isoformat()}))
    return stamped


def expected_seqs(events: list[Event], query: EventQuery) -> list[int]:
    on_branch = None
    if query.branch_head is not None:
        on_branch = set(ids(EventTree(events).path_to_root(query.branch_head)))
    result = []
    for seq, event in enumerate(events):
        if query.kinds is not None and event.kind not in query.kinds:
            continue
        if query.sources is not None and event.source not in query.sources:
            continue
        if query.after_seq is not None and seq <= query.after_seq:
            continue
        if query.before_seq is not None and seq >= query.before_seq:
            continue
        if query.time_from is not None and event.time < query.time_from.replace(
            tzinfo=query.time_from.tzinfo or UTC
        ):
            continue
        if query.time_to is not None and event.time >= query.time_to.replace(
            tzinfo=query.time_to.tzinfo or UTC
        ):
            continue
        if on_branch is not None and event.id not in on_branch:
            continue
        if query.text is not None:
            from treadle.events.model import event_to_json

            if query.text.lower() not in event_to_json(event).lower():
                continue
        result.append(seq)
    return result[::-1] if query.order == "desc" else result


def page_through(store: EventStore, conv: str, query: EventQuery) -> list[int]:
    """Every seq of ``query``, following next_cursor page by page."""
    seen: list[int] = []
    cursor_field = "before_seq" if query.order == "desc" else "after_seq"
    current = query
    for _ in range(1000):
        page = store.search(conv, current)
        assert len(page.items) <= query.limit
        seen.extend(item.seq for item in page.items)
        if page.next_cursor is None:
            return seen
        assert page.items
        assert page.next_cursor == page.items[-1].seq
        current = _replace(current, **{cursor_field: page.next_cursor})
    raise AssertionError("paging did not end")


def _replace(query: EventQuery, **changes) -> EventQuery:
    from dataclasses import replace

    return replace(query, **changes)


@pytest.fixture
def searchable(store: EventStore, conv: str) -> list[Event]:
    events = search_log()
    append_in_random_batches(store, conv, events, random.Random(5))
    return events


QUERIES = [
    EventQuery(),
    EventQuery(kinds=["action"]),
    EventQuery(kinds=["observation", "message"]),
    EventQuery(kinds=["state_change", "message", "state_change"]),
    EventQuery(kinds=["pause"]),
    EventQuery(kinds=[]),
    EventQuery(sources=["agent"]),
    EventQuery(sources=["user", "environment"]),
    EventQuery(sources=[]),
    EventQuery(after_seq=10),
    EventQuery(before_seq=10),
    EventQuery(after_seq=5, before_seq=20),
    EventQuery(after_seq=20, before_seq=5),
    EventQuery(time_from=T0 + timedelta(minutes=7)),
    EventQuery(time_to=T0 + timedelta(minutes=7)),  # exclusive upper bound
    EventQuery(time_from=T0 + timedelta(minutes=3), time_to=T0 + timedelta(minutes=9)),
    EventQuery(time_from=(T0 + timedelta(minutes=4)).replace(tzinfo=None)),  # naive = UTC
    EventQuery(branch_head="side5"),
    EventQuery(branch_head="o11"),
    EventQuery(branch_head="o3"),
    EventQuery(text="needle"),
    EventQuery(text="grüSSe"),
    EventQuery(text="GRÜSSE"),
    EventQuery(text="Grüße"),
    EventQuery(text="GRÜßE"),
    EventQuery(text='"tool_name":"terminal"'),
    EventQuery(text="100%_"),
    EventQuery(kinds=["observation"], sources=["environment"], after_seq=3),
    EventQuery(kinds=["action", "observation"], branch_head="side5", text="agent"),
    EventQuery(sources=["agent"], branch_head="o11", time_from=T0 + timedelta(minutes=5)),
    EventQuery(kinds=["message"], time_to=T0 + timedelta(minutes=40), text="RETRY"),
    EventQuery(branch_head="side5", after_seq=8, before_seq=40),
]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: repr(q)[10:70])
@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("limit", [1, 4, 100])
def test_search_and_count_match_a_plain_filter(
    store: EventStore, conv: str, searchable: list[Event], query: EventQuery, order: str, limit
) -> None:
    query = _replace(query, order=order, limit=limit)
    expected = expected_seqs(searchable, query)
    assert page_through(store, conv, query) == expected
    assert store.count(conv, query) == len(expected)


def test_search_items_are_the_stored_events(
    store: EventStore, conv: str, searchable: list[Event]
) -> None:
    page = store.search(conv, EventQuery(kinds=["observation"], limit=3))
    assert [item.event for item in page.items] == [searchable[item.seq] for item in page.items]


def test_branch_filter_excludes_a_sibling_branch(
    store: EventStore, conv: str, searchable: list[Event]
) -> None:
    on_side = ids(store.search(conv, EventQuery(branch_head="side5")).items)
    assert "side0" in on_side
    assert "o5" in on_side
    assert not {"a6", "o6", "o11"} & set(on_side)
    on_main = ids(store.search(conv, EventQuery(branch_head="o11")).items)
    assert "o11" in on_main
    assert not {f"side{i}" for i in range(6)} & set(on_main)
    assert store.count(conv, EventQuery(branch_head="side5")) == len(on_side)
    with pytest.raises(EventNotFound):
        store.search(conv, EventQuery(branch_head="ghost"))
    with pytest.raises(EventNotFound):
        store.count(conv, EventQuery(branch_head="ghost"))


def test_exact_page_boundary_and_empty(store: EventStore, conv: str) -> None:
    empty = store.search(conv, EventQuery())
    assert (empty.items, empty.next_cursor) == ([], None)
    assert store.count(conv, EventQuery()) == 0
    store.append_batch(conv, [msg(f"e{i}") for i in range(10)])
    full = store.search(conv, EventQuery(limit=10))
    assert (len(full.items), full.next_cursor) == (10, None)
    first = store.search(conv, EventQuery(limit=5))
    assert (len(first.items), first.next_cursor) == (5, 4)
    second = store.search(conv, EventQuery(limit=5, after_seq=4))
    assert ([i.seq for i in second.items], second.next_cursor) == ([5, 6, 7, 8, 9], None)
    back = store.search(conv, EventQuery(limit=5, order="desc"))
    assert ([i.seq for i in back.items], back.next_cursor) == ([9, 8, 7, 6, 5], 5)
    rest = store.search(conv, EventQuery(limit=5, order="desc", before_seq=5))
    assert ([i.seq for i in rest.items], rest.next_cursor) == ([4, 3, 2, 1, 0], None)
    nothing = store.search(conv, EventQuery(limit=0))
    assert (nothing.items, nothing.next_cursor) == ([], None)
    with pytest.raises(ValueError, match="limit"):
        store.search(conv, EventQuery(limit=-1))


# -- subscribe -------------------------------------------------------------------------------


def test_subscribe_replays_then_follows_a_writer_thread(store: EventStore, conv: str) -> None:
    store.append_batch(conv, [msg(f"e{i}") for i in range(5)])
    stream = store.subscribe(conv, after_seq=1, poll_interval=0.01)
    total = 200

    def write() -> None:
        for index in range(5, total):
            if index % 7 == 0:
                store.append_batch(conv, [msg(f"e{index}")])
            else:
                store.append(conv, msg(f"e{index}"))
            if index % 20 == 0:
                time.sleep(0.02)  # let the subscriber wait and wake up too

    writer = threading.Thread(target=write)
    writer.start()
    got = []
    try:
        for stored in stream:
            got.append(stored)
            if stored.seq == total - 1:
                break
    finally:
        stream.close()
        writer.join()
    assert [s.seq for s in got] == list(range(2, total))
    assert ids(got) == [f"e{i}" for i in range(2, total)]


def test_subscribe_from_the_end_waits_for_new_events(store: EventStore, conv: str) -> None:
    store.append(conv, msg("old"))
    stream = store.subscribe(conv, after_seq=0, poll_interval=0.01)
    timer = threading.Timer(0.2, lambda: store.append(conv, msg("new")))
    timer.start()
    try:
        first = next(stream)
    finally:
        stream.close()
        timer.join()
    assert (first.seq, first.event.id) == (1, "new")
    with pytest.raises(StopIteration):
        next(stream)


def test_subscribe_sees_appends_of_another_process(store: EventStore, conv: str) -> None:
    count = 150
    stream = store.subscribe(conv, poll_interval=0.01)
    child = multiprocessing.get_context("spawn").Process(
        target=append_messages, args=(store.url, conv, count)
    )
    child.start()

    finished = threading.Event()

    def stop_waiting_if_the_child_fails() -> None:
        # The stream blocks until an event comes: if the child ended and the stream did not
        # finish soon after, closing the store ends it (no hang). Only the sentinel is waited
        # on here: joining the child from two threads races on reaping it.
        wait([child.sentinel], timeout=90)
        if not finished.wait(30):
            store.close()

    guard = threading.Thread(target=stop_waiting_if_the_child_fails, daemon=True)
    guard.start()
    got: list[StoredEvent] = []
    deadline = time.monotonic() + 60
    try:
        for stored in stream:
            got.append(stored)
            if stored.seq == count - 1 or time.monotonic() > deadline:
                break
    finally:
        finished.set()
        stream.close()
        child.join(30)
    assert child.exitcode == 0
    assert [s.seq for s in got] == list(range(count))
    assert ids(got) == [f"p{i}" for i in range(count)]
