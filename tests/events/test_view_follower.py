"""The live transcript (``events.view.TranscriptFollower``): a client that applies the updates
of each event, in append order, holds the transcript ``events.view.transcript`` makes of the
whole path (hypothesis, over random logs), with the status deciding waiting and running."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from events.test_projection_properties import interleaved_logs
from treadle.data.transcript import TRANSCRIPT_ADAPTER, TranscriptUpdate
from treadle.events.model import (
    ActionEvent,
    CondensationEvent,
    MessageEvent,
    ObservationEvent,
    StateChangeEvent,
)
from treadle.events.view import SHOWN_STATE_KEYS, TranscriptFollower, transcript

UPDATES: TypeAdapter[list[TranscriptUpdate]] = TypeAdapter(list[TranscriptUpdate])


def _shows(item: dict[str, Any], event_id: str) -> bool:
    if item["type"] != "response":
        return item["event_id"] == event_id
    return any(
        entry is not None and entry["event"]["id"] == event_id
        for call in item["calls"]
        for entry in (call["action"], call["result"])
    )


def apply(items: list[dict[str, Any]], update: dict[str, Any]) -> None:
    """What the Canvas does with one update (web/timeline.js ``apply``), in Python."""
    if update["op"] == "item":
        item = update["item"]
        if item["type"] != "state_change":  # it continues the path: the newest item
            items.append(item)
            return
        parent = item["parent_id"]
        at = next((i for i, shown in enumerate(items) if _shows(shown, parent)), None)
        if at is None:
            items.append(item)
            return
        at += 1
        while at < len(items) and items[at]["type"] == "state_change":
            at += 1
        items.insert(at, item)
    elif update["op"] == "call":
        item = next(item for item in items if item["event_id"] == update["item"])
        if update["index"] == len(item["calls"]):
            item["calls"].append(update["call"])
        else:
            item["calls"][update["index"]] = update["call"]
    else:
        for item in items:
            if item["event_id"] in update["items"]:
                item["folded_by"] = update["by"]


def followed(events, status: str | None = None) -> list[dict[str, Any]]:
    follower = TranscriptFollower()
    items: list[dict[str, Any]] = []
    for event in events:
        _parent, _answers, updates = follower.feed(event, None, status)
        UPDATES.validate_python(updates)  # the wire shape (api.transcript)
        for update in copy.deepcopy(updates):
            apply(items, update)
    return items


def _shown(items):
    return [
        item
        for item in items
        if item["type"] != "state_change" or item["event"]["key"] in SHOWN_STATE_KEYS
    ]


@given(interleaved_logs(), st.sampled_from([None, "running", "waiting_for_confirmation", "idle"]))
def test_applied_updates_are_the_transcript_of_the_path(log, status):
    expected = _shown(transcript(log.events, status=status))
    assert followed(log.events, status) == expected
    TRANSCRIPT_ADAPTER.validate_python(expected)


def _call(id: str, response: str, parent: str) -> ActionEvent:
    return ActionEvent(
        id=id,
        llm_response_id=response,
        tool_name="terminal",
        tool_call_id=f"c-{id}",
        arguments={"command": "true"},
        raw_arguments="{}",
        parent_id=parent,
    )


def test_a_status_change_tells_open_calls_waiting_then_running():
    follower = TranscriptFollower()
    user = MessageEvent(id="u", source="user", text="go")
    follower.feed(user, 0, "running")
    _, _, updates = follower.feed(_call("a", "r", "u"), 1, "running")
    assert updates[0]["item"]["calls"][0]["state"] == "running"
    waiting = StateChangeEvent(
        key="status", value={"status": "waiting_for_confirmation"}, parent_id="a"
    )
    _, _, updates = follower.feed(waiting, 2, "waiting_for_confirmation")
    assert [(u["op"], u["item"], u["index"], u["call"]["state"]) for u in updates] == [
        ("call", "a", 0, "waiting")
    ]
    result = ObservationEvent(
        id="o", action_id="a", tool_call_id="c-a", tool_name="terminal", content="", parent_id="a"
    )
    _, answers, updates = follower.feed(result, 3, "running")
    assert answers == "a"
    assert [(u["op"], u["call"]["state"]) for u in updates] == [("call", "done")]
    assert updates[0]["call"]["result"]["event"]["id"] == "o"


def test_a_condensation_folds_the_items_it_forgot_and_only_those():
    follower = TranscriptFollower()
    events = [
        MessageEvent(id="u", source="user", text="go"),
        _call("a1", "r1", "u"),
        _call("a2", "r1", "a1"),
        ObservationEvent(
            id="o1",
            action_id="a1",
            tool_call_id="c-a1",
            tool_name="terminal",
            content="",
            parent_id="a2",
        ),
        ObservationEvent(
            id="o2",
            action_id="a2",
            tool_call_id="c-a2",
            tool_name="terminal",
            content="",
            parent_id="o1",
        ),
        _call("b1", "r2", "o2"),
        ObservationEvent(
            id="p1",
            action_id="b1",
            tool_call_id="c-b1",
            tool_name="terminal",
            content="",
            parent_id="b1",
        ),
        # forgets all of response r1 and part of r2 (its result): only r1 and the message fold
        CondensationEvent(
            id="k", forgotten_event_ids=("u", "a1", "a2", "o1", "o2", "p1"), parent_id="p1"
        ),
    ]
    for seq, event in enumerate(events):
        _, _, updates = follower.feed(event, seq, "running")
    folds = [u for u in updates if u["op"] == "fold"]
    assert folds == [{"op": "fold", "by": "k", "items": ["u", "a1"]}]
    whole = transcript(events)
    assert [item["event_id"] for item in whole if item["folded_by"] == "k"] == ["u", "a1"]
