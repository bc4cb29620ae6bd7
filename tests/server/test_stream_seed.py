"""A stream's state seeded from a window of the log equals the state fed the whole log, so a
replay from any seq sends the frames a reader connected all along got (real SQLite store)."""

from __future__ import annotations

import json

import pytest

from treadle.events.model import (
    ActionEvent,
    CondensationEvent,
    MessageEvent,
    ObservationEvent,
    TokenUsage,
)
from treadle.runtime.status import ConversationStatus, StreamState, head_move_event, status_event
from treadle.server import stream
from treadle.server.stream import frame_texts, seeded_state
from treadle.store.urls import open_store


@pytest.fixture
def log(tmp_path):
    """A log with statuses, a head move, calls and their usage (costs whose float sums depend
    on their order); returns (store, conversation id)."""
    store = open_store(f"sqlite:///{tmp_path / 'seed.db'}")
    cid = store.create_conversation(title="seed").id
    store.append(cid, MessageEvent(id="u1", source="user", text="go"))
    store.append(cid, status_event(ConversationStatus.RUNNING, "u1"), move_head=False)
    for n in range(3):
        action = ActionEvent(
            id=f"a{n}",
            llm_response_id=f"r{n}",
            tool_call_id=f"c{n}",
            tool_name="think",
            raw_arguments="{}",
            usage=TokenUsage(prompt_tokens=100 + n, completion_tokens=7, cost_usd=0.1 * (n + 1)),
        )
        store.append(cid, action)
        store.append(
            cid,
            ObservationEvent(
                id=f"o{n}", action_id=f"a{n}", tool_call_id=f"c{n}", tool_name="think"
            ),
        )
    summary = CondensationEvent(
        id="k1",
        forgotten_event_ids=("a0", "o0"),
        summary="thought",
        usage=TokenUsage(prompt_tokens=40, completion_tokens=3, cost_usd=0.07),
    )
    store.append(cid, summary)
    store.append(cid, status_event(ConversationStatus.FINISHED, "k1", "done"), move_head=False)
    store.set_head(cid, "u1")
    store.append(cid, head_move_event("u1"), move_head=False)
    store.append(cid, status_event(ConversationStatus.IDLE, "u1", "switched"), move_head=False)
    store.append(cid, MessageEvent(id="u2", source="user", text="again", parent_id="u1"))
    yield store, cid
    store.close()


@pytest.mark.parametrize("window", [1, 2, 3, 1000])
def test_frames_after_any_seq_equal_those_of_the_whole_log(log, window, monkeypatch):
    store, cid = log
    monkeypatch.setattr(stream, "SEED_WINDOW", window)
    events = store.get_range(cid, 0, 10**6)
    whole = StreamState()
    live = [frame_texts(stored, whole) for stored in events]
    for after in range(-1, len(events)):
        state = seeded_state(store, cid, after)
        replayed = [frame_texts(stored, state) for stored in events[after + 1 :]]
        if window >= len(events):
            assert replayed == live[after + 1 :], f"after_seq={after}"
        else:
            # a window knows the transcript items of its events only (docs/stream.md): every
            # other fact is the same whatever the window
            assert _facts(replayed) == _facts(live[after + 1 :]), f"after_seq={after}"


def _facts(frames: list[tuple[str, ...]]) -> list[list[dict]]:
    decoded = [[json.loads(text) for text in texts] for texts in frames]
    for texts in decoded:
        for frame in texts:
            frame.pop("transcript", None)
    return decoded


def test_the_seed_reads_a_window_not_the_log(log, monkeypatch):
    store, cid = log
    monkeypatch.setattr(stream, "SEED_WINDOW", 2)
    read = []
    original = store.get_range

    def counting(conversation_id, start, end):
        page = original(conversation_id, start, end)
        read.extend(stored.seq for stored in page)
        return page

    monkeypatch.setattr(store, "get_range", counting)
    last = store.get_conversation(cid).event_count - 1
    state = seeded_state(store, cid, last)
    assert len(read) == 2
    assert (state.status, state.head) == (ConversationStatus.IDLE, "u2")


def test_the_seed_at_the_end_says_the_stores_totals_and_earlier_what_came_before(log):
    store, cid = log
    info = store.get_conversation(cid)
    assert (info.prompt_tokens, info.completion_tokens) == (100 + 101 + 102 + 40, 7 * 3 + 3)
    at_end = seeded_state(store, cid, info.event_count - 1)
    assert at_end.usage.prompt_tokens == info.prompt_tokens
    assert at_end.usage.completion_tokens == info.completion_tokens
    assert at_end.usage.cost_usd == info.cost_usd  # the row's own figure, nothing subtracted
    events = store.get_range(cid, 0, 10**6)
    first_action = next(s.seq for s in events if s.event.id == "a0")
    before = seeded_state(store, cid, first_action - 1).usage
    assert (before.prompt_tokens, before.completion_tokens) == (0, 0)
    assert before.cost_usd == pytest.approx(0.0, abs=1e-12)
    after_one = seeded_state(store, cid, first_action).usage
    assert (after_one.prompt_tokens, after_one.completion_tokens) == (100, 7)
    assert after_one.cost_usd == pytest.approx(0.1)


def _isolation(sandbox: str, parent: str):
    from treadle.events.model import StateChangeEvent

    value = {"sandbox": sandbox, "network": "off", "limits": {}}
    return StateChangeEvent(key="isolation", value=value, parent_id=parent)


def test_an_isolation_frame_counts_the_runs_without_a_sandbox_whatever_the_window(
    tmp_path, monkeypatch
):
    store = open_store(f"sqlite:///{tmp_path / 'iso.db'}")
    try:
        cid = store.create_conversation(title="iso").id
        store.append(cid, MessageEvent(id="u1", source="user", text="go"))
        for sandbox in ("none", "bubblewrap", "none", "bubblewrap"):
            store.append(cid, _isolation(sandbox, "u1"), move_head=False)
        events = store.get_range(cid, 0, 100)
        whole = StreamState()
        frames = [json.loads(frame_texts(stored, whole)[0]) for stored in events]
        assert "isolation" not in frames[0]
        counts = [frame["isolation"]["unsandboxed_runs"] for frame in frames[1:]]
        assert counts == [1, 1, 2, 2]
        assert frames[4]["isolation"]["sandbox"] == "bubblewrap"
        monkeypatch.setattr(stream, "SEED_WINDOW", 1)  # the earlier facts are looked up
        state = seeded_state(store, cid, 3)
        (last,) = frame_texts(events[4], state)
        assert json.loads(last)["isolation"]["unsandboxed_runs"] == 2
    finally:
        store.close()
