"""The transcript and the log follower on hand-made logs: call states, side events, parents."""

from treadle.events.model import (
    ROOT,
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    MessageEvent,
    ObservationEvent,
    StateChangeEvent,
    SystemPromptEvent,
    UserRejectionEvent,
)
from treadle.events.view import Beside, LogFollower, transcript


def _action(event_id, response, call=None, thought=""):
    return ActionEvent(
        id=event_id,
        llm_response_id=response,
        tool_call_id=call or f"call-{event_id}",
        tool_name="terminal",
        raw_arguments="{}",
        thought=thought,
    )


def _observation(event_id, action, action_id=None, call=None):
    return ObservationEvent(
        id=event_id,
        action_id=action_id or action.id,
        tool_call_id=call or action.tool_call_id,
        tool_name="terminal",
        content="ok",
    )


def test_one_item_per_response_with_each_call_and_its_state():
    a1, a2, a3 = _action("a1", "r1", thought="two things"), _action("a2", "r1"), _action("a3", "r1")
    log = [
        SystemPromptEvent(id="sys", text="be good"),
        MessageEvent(id="u1", source="user", text="go"),
        a1,
        a2,
        a3,
        _observation("o2", a2),  # results in any order
        UserRejectionEvent(id="x1", action_id="a1", tool_call_id="call-a1", tool_name="terminal"),
    ]
    items = transcript(log)
    assert [item["type"] for item in items] == ["system_prompt", "message", "response"]
    response = items[2]
    assert response["thought"] == "two things"
    assert response["llm_response_id"] == "r1"
    states = {call["action"]["event"]["id"]: call["state"] for call in response["calls"]}
    assert states == {"a1": "rejected", "a2": "done", "a3": "pending"}
    assert response["parent_id"] == "u1"


def test_a_call_the_conversation_moved_past_is_interrupted():
    a1 = _action("a1", "r1")
    log = [MessageEvent(id="u1", source="user", text="go"), a1]
    assert transcript(log)[1]["calls"][0]["state"] == "pending"
    log.append(MessageEvent(id="u2", source="user", text="never mind"))
    assert transcript(log)[1]["calls"][0]["state"] == "interrupted"


def test_an_agent_error_answers_by_call_id_and_a_stray_result_is_its_own_item():
    a1 = _action("a1", "r1")
    error = AgentErrorEvent(id="e1", tool_call_id="call-a1", tool_name="terminal", error="bad")
    stray = _observation("o9", a1, action_id="nobody", call="call-nobody")
    items = transcript([a1, error, stray])
    assert items[0]["calls"][0]["state"] == "errored"
    assert items[0]["calls"][0]["result"]["event"]["id"] == "e1"
    assert items[1]["type"] == "result"
    assert items[1]["event"]["id"] == "o9"


def test_action_id_wins_over_tool_call_id():
    # Two open calls share a tool call id; the result names the first by action id.
    a1, a2 = _action("a1", "r1", call="same"), _action("a2", "r2", call="same")
    items = transcript([a1, a2, _observation("o1", a1, action_id="a1", call="same")])
    assert items[0]["calls"][0]["state"] == "done"
    assert items[1]["calls"][0]["state"] == "pending"


def test_side_events_worth_showing_follow_the_item_holding_their_parent():
    a1 = _action("a1", "r1")
    log = [MessageEvent(id="u1", source="user", text="go"), a1, _observation("o1", a1)]
    error = StateChangeEvent(id="s1", key="model_error", value={"error": "bad"}, parent_id="u1")
    moved = StateChangeEvent(id="s2", key="head", value={"head": "o1"}, parent_id="o1")
    status = StateChangeEvent(id="s4", key="status", value={"status": "idle"}, parent_id="o1")
    elsewhere = StateChangeEvent(id="s3", key="head", value={"head": "zz"}, parent_id="zz")
    side = [Beside(error, "u1", 3), Beside(moved, "o1", 4), Beside(status, "o1", 5)]
    items = transcript(log, [*side, Beside(elsewhere, "zz")], seqs=[0, 1, 2])
    assert [item["event_id"] for item in items] == ["u1", "s1", "a1", "s2"]
    assert items[3]["parent_id"] == "o1"
    assert [items[0]["seq"], items[1]["seq"], items[3]["seq"]] == [0, 3, 4]
    call = items[2]["calls"][0]
    assert (call["action"]["seq"], call["result"]["seq"]) == (1, 2)


def test_a_condensation_is_an_item():
    log = [
        MessageEvent(id="u1", source="user", text="go"),
        CondensationEvent(id="c1", forgotten_event_ids=("u1",), summary="s", summary_offset=0),
    ]
    assert transcript(log)[1]["type"] == "condensation"


def test_the_follower_applies_the_legacy_parent_rule_and_links():
    a1 = _action("a1", "r1")
    legacy = MessageEvent(id="u1", source="user", text="go")  # no parent: the one before
    root = MessageEvent(id="u2", source="user", text="anew", parent_id=ROOT)
    follower = LogFollower()
    assert follower.feed(legacy) == (None, None)
    assert follower.feed(a1) == ("u1", None)
    assert follower.feed(_observation("o1", a1)) == ("a1", "a1")
    assert follower.feed(root) == (None, None)
    assert follower.feed(MessageEvent(id="u3", source="user", text="x", parent_id="a1")) == (
        "a1",
        None,
    )
