"""The stream as a protocol (docs/stream.md) on a real server: one event frame per stored event
carrying its resolved parent, the action it answers, and the status and head after it; a replay
sends the very frames the live stream sent; the event is the stored JSON; the transcript route."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.sync.client import connect

from support.scripts import think_steps
from treadle.api.stream import EventFrame, RunFinishedFrame

TWO_CALLS = [
    {
        "tool_calls": [
            {"name": "think", "arguments": {"thought": "one"}},
            {"name": "think", "arguments": {"thought": "two"}},
        ]
    },
    {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
]


def _url(server, conversation_id: str, query: str) -> str:
    base = server.base_url.replace("http", "ws")
    return f"{base}/api/conversations/{conversation_id}/events/stream?{query}"


def _read(url: str, until_seq: int, *, until_finished: bool = False) -> list[dict]:
    """Frames (arrays flattened) up to the event frame of ``until_seq`` (and, when asked,
    the run_finished frame after it)."""
    frames: list[dict] = []
    with connect(url, open_timeout=10) as socket:
        while True:
            data = json.loads(socket.recv(timeout=30))
            frames.extend(data if isinstance(data, list) else [data])
            last = frames[-1]
            done = last["seq"] >= until_seq if "seq" in last else False
            if done and (not until_finished or last["type"] == "run_finished"):
                return frames


def test_live_frames_equal_replayed_ones_and_carry_status_and_head(server, client, settings_for):
    conversation = client.create_conversation(settings_for(TWO_CALLS))
    conversation.send_message("go")
    start = conversation.count()
    with connect(_url(server, conversation.id, "batch=true"), open_timeout=10) as live_socket:
        first = json.loads(live_socket.recv(timeout=10))  # joined: the replay has begun
        assert conversation.run().value == "finished"
        last_seq = conversation.count() - 1
        live = first if isinstance(first, list) else [first]
        while not (live[-1].get("seq") == last_seq and live[-1]["type"] == "run_finished"):
            data = json.loads(live_socket.recv(timeout=30))
            live.extend(data if isinstance(data, list) else [data])
    replayed = _read(_url(server, conversation.id, "batch=true"), last_seq, until_finished=True)
    assert replayed == live
    # From the middle, the replay is the same frames from there (the state was seeded).
    middle = _read(_url(server, conversation.id, f"after_seq={start}"), last_seq)
    assert middle == [f for f in live if f["seq"] > start][: len(middle)]
    assert len(middle) >= last_seq - start

    events = [EventFrame.model_validate(f) for f in live if f["type"] == "event"]
    assert [frame.seq for frame in events] == list(range(last_seq + 1))
    by_id = {frame.event["id"]: frame for frame in events}
    for frame in events:
        if frame.event["kind"] in ("observation", "agent_error", "user_rejection"):
            assert frame.answers == frame.event.get("action_id")
            assert by_id[frame.answers].event["tool_call_id"] == frame.event["tool_call_id"]
        else:
            assert frame.answers is None
        if frame.event.get("parent_id") not in (None, "__root__"):
            assert frame.parent_id == frame.event["parent_id"]
    # status and head after the last event are the conversation's
    assert events[-1].status.status == "finished"
    assert events[-1].head == conversation.head
    assert [f["type"] for f in live].count("run_finished") == 1
    finished = RunFinishedFrame.model_validate(live[-1])
    assert (finished.seq, finished.status) == (last_seq, "finished")
    # while it ran, frames said running
    assert any(frame.status.status == "running" for frame in events)


def test_frames_carry_the_usage_totals_after_each_event_the_last_the_stores(
    server, client, settings_for
):
    conversation = client.create_conversation(settings_for(TWO_CALLS))
    conversation.send_message("go")
    assert conversation.run().value == "finished"
    last_seq = conversation.count() - 1
    frames = [f for f in _read(_url(server, conversation.id, ""), last_seq) if f["type"] == "event"]
    tokens = 0
    for frame in frames:  # each frame's totals: the usages recorded up to its event
        usage = frame["event"].get("usage")
        if usage and frame["event"]["kind"] in ("action", "message", "condensation"):
            tokens += usage["prompt_tokens"] + usage["completion_tokens"]
        shown = EventFrame.model_validate(frame).usage
        assert shown.prompt_tokens + shown.completion_tokens == tokens
    totals = conversation.info()
    assert frames[-1]["usage"] == {
        "prompt_tokens": totals.prompt_tokens,
        "completion_tokens": totals.completion_tokens,
        "cost_usd": totals.cost_usd,
    }
    assert totals.prompt_tokens > 0


def test_a_branch_switch_moves_the_head_in_the_frames(server, client, settings_for):
    conversation = client.create_conversation(settings_for(think_steps(2)))
    conversation.send_message("go")
    assert conversation.run().value == "finished"
    first_message = conversation.active_path()[0].id
    conversation.switch_branch(first_message)
    last_seq = conversation.count() - 1
    frames = _read(_url(server, conversation.id, ""), last_seq)
    events = [f for f in frames if f["type"] == "event"]
    assert events[-1]["head"] == first_message == conversation.head
    assert events[-1]["status"]["status"] == "idle"
    assert events[-3]["head"] != first_message


def test_the_event_is_sent_as_the_store_holds_it(server, client, settings_for):
    conversation = client.create_conversation(settings_for(think_steps(1)))
    conversation.send_message("go")
    assert conversation.run().value == "finished"
    with httpx.Client(base_url=server.base_url) as http:
        page = http.get(f"/api/conversations/{conversation.id}/events?limit=1000").json()
    frames = _read(_url(server, conversation.id, ""), page["items"][-1]["seq"])
    stored = {item["seq"]: item["event"] for item in page["items"]}
    assert {f["seq"]: f["event"] for f in frames if f["type"] == "event"} == stored


def test_transcript_route_pairs_calls_with_results_and_pages(server, client, settings_for):
    conversation = client.create_conversation(settings_for(TWO_CALLS))
    conversation.send_message("go")
    assert conversation.run().value == "finished"
    route = f"/api/conversations/{conversation.id}/transcript"
    with httpx.Client(base_url=server.base_url) as http:
        whole = http.get(route).json()
        assert whole["head"] == conversation.head
        assert whole["next_before_seq"] is None  # the path's start is in it
        items = whole["items"]
        responses = [item for item in items if item["type"] == "response"]
        assert [len(item["calls"]) for item in responses] == [2, 1]
        assert all(call["state"] == "done" for item in responses for call in item["calls"])
        # seqs as stored: each item's is its first event's
        events = http.get(f"/api/conversations/{conversation.id}/events?limit=1000").json()
        seq_of = {item["event"]["id"]: item["seq"] for item in events["items"]}
        assert all(item["seq"] == seq_of[item["event_id"]] for item in items)
        for call in (call for item in responses for call in item["calls"]):
            assert call["result"]["seq"] == seq_of[call["result"]["event"]["id"]]
        # paged from the newest by seq cursor: the pages put together are the whole
        pages, cursor = [], None
        while True:
            params = {"limit": 1} if cursor is None else {"limit": 1, "before_seq": cursor}
            page = http.get(route, params=params).json()
            pages[:0] = page["items"]
            assert len(page["items"]) == 1
            cursor = page["next_before_seq"]
            if cursor is None:
                break
        assert pages == items
        at_first = http.get(route, params={"head": items[0]["event_id"]}).json()
        assert at_first["items"] == items[:1]
        assert http.get(route, params={"before_seq": -2}).status_code == 422
        assert http.get(route, params={"head": "nope"}).status_code == 404
        assert http.get("/api/conversations/nope/transcript").status_code == 404


def test_a_frame_embeds_the_stored_json_verbatim():
    from treadle.events.model import MessageEvent
    from treadle.runtime.status import StreamState
    from treadle.server.stream import frame_texts
    from treadle.store.base import StoredEvent

    event = MessageEvent(id="u1", source="user", text="hi")
    # Spacing no encoder of ours produces: the text can only have come from the payload.
    payload = '{"kind": "message",  "id": "u1", "source": "user", "role": "user", "text": "hi"}'
    (text,) = frame_texts(StoredEvent(0, event, payload=payload), StreamState())
    assert f'"event":{payload},' in text
    assert json.loads(text)["head"] == "u1"


def test_transcript_pages_of_a_long_path_put_together_are_its_transcript(server):
    from treadle.bench.canvas import clean_chunks
    from treadle.events.view import transcript
    from treadle.store.urls import open_store

    store = open_store(server.store_url)
    try:
        cid = store.create_conversation(title="long").id
        for chunk in clean_chunks(2000, seed=3):
            store.append_batch(cid, chunk)
        stored = store.get_range(cid, 0, 10**6)
        path = [s for s in stored if s.event.kind != "state_change"]
        whole = transcript([s.event for s in path], seqs=[s.seq for s in path])
    finally:
        store.close()
    route = f"/api/conversations/{cid}/transcript"
    pages: list[dict] = []
    params: dict = {"limit": 40}  # a window of 500 events: the path is read in pieces
    with httpx.Client(base_url=server.base_url) as http:
        while True:
            page = http.get(route, params=params).json()
            assert 0 < len(page["items"]) <= 40
            pages[:0] = page["items"]
            if page["next_before_seq"] is None:
                break
            params = {"limit": 40, "before_seq": page["next_before_seq"]}
    assert pages == whole


def test_the_python_client_mirrors_status_and_head_from_the_frames(client, settings_for):
    conversation = client.create_conversation(settings_for(TWO_CALLS))
    conversation.send_message("go")
    assert conversation.run().value == "finished"
    subscription = conversation.subscribe()
    last = conversation.count() - 1
    frames = subscription.messages_until(lambda m: m["type"] == "run_finished", timeout_s=30)
    subscription.close()
    assert subscription.last_seq == last
    assert subscription.status == {
        "status": "finished",
        "reason": conversation.info().status_reason,
        "controls": [],  # what "finished" offers (api.status.CONTROLS): a new message only
    }
    assert subscription.head == conversation.head
    assert [f["type"] for f in frames].count("run_finished") == 1
    assert frames[-1]["seq"] == frames[-2]["seq"]  # after its event, in the same message


def test_transient_frames_are_not_counted_by_limit():
    from treadle.server.routes_events import _first_stored
    from treadle.server.stream import Delivery

    live = Delivery.transient({"type": "output", "text": "partial"})
    stored = [Delivery(seq, ("{}",)) for seq in range(3)]
    assert live.seq is None
    assert json.loads(live.texts[0]) == {"type": "output", "text": "partial", "stored": False}
    deliveries = [live, stored[0], live, stored[1], stored[2]]
    assert _first_stored(deliveries, 2) == deliveries[:4]
    assert _first_stored(deliveries, 5) == deliveries


def test_the_client_passes_transient_frames_without_a_seq_check():
    from treadle.client.stream import EventSubscription, StreamGap

    subscription = EventSubscription(None, "c", after_seq=4)  # type: ignore[arg-type]
    assert subscription._take({"type": "output", "stored": False, "text": "x"})
    assert subscription.last_seq == 4
    event = {
        "kind": "message",
        "id": "u",
        "source": "user",
        "text": "hi",
        "timestamp": "2026-01-01T00:00:00Z",
    }
    frame = {"type": "event", "seq": 5, "event": event, "parent_id": None, "answers": None}
    assert subscription._take({**frame, "status": {"status": "idle", "reason": None}, "head": "u"})
    assert (subscription.last_seq, subscription.head) == (5, "u")
    assert not subscription._take({"type": "run_finished", "seq": 3, "status": "idle"})
    with pytest.raises(StreamGap):
        subscription._take({**frame, "seq": 7, "status": {"status": "idle"}, "head": "u"})
    for broken in (None, "6", 6.0):  # a stored event without an integer seq breaks the protocol
        with pytest.raises(StreamGap, match="integer seq"):
            subscription._take({**frame, "seq": broken, "status": {"status": "idle"}, "head": "u"})
    assert subscription.last_seq == 5
