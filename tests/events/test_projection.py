"""The projection: each PROJECT-* rule with a passing and a breaking case, condensation, and
the seed's worked example 2, through ``project_messages``."""

import json

import pytest

from treadle.errors import ContractError
from treadle.events.model import (
    ROOT,
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    ForeignEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
    SystemPromptEvent,
    UserRejectionEvent,
    event_to_json,
)
from treadle.events.projection import count_tool_calls, project_messages
from treadle.events.tree import EventTree

# -- events, briefly ----------------------------------------------------------------------


def user(event_id, text="hi", images=()):
    return MessageEvent(id=event_id, source="user", text=text, image_urls=images)


def agent_says(event_id, text, reasoning=None):
    return MessageEvent(id=event_id, source="agent", text=text, reasoning=reasoning)


def act(event_id, response, call=None, *, tool="terminal", args=None, thought="", reasoning=None):
    raw = args if args is not None else json.dumps({"command": f"echo {event_id}"})
    return ActionEvent(
        id=event_id,
        llm_response_id=response,
        tool_call_id=call or f"c{event_id}",
        tool_name=tool,
        raw_arguments=raw,
        thought=thought,
        reasoning=reasoning,
    )


def obs(action, content=None, event_id=None):
    return ObservationEvent(
        id=event_id or f"o-{action.id}",
        action_id=action.id,
        tool_call_id=action.tool_call_id,
        tool_name=action.tool_name,
        content=content if content is not None else f"out {action.id}",
    )


def error_for(action, error="bad arguments", event_id=None):
    """An agent error answers by tool call id only (no action id), as after a bad tool call."""
    return AgentErrorEvent(
        id=event_id or f"e-{action.id}",
        tool_call_id=action.tool_call_id,
        tool_name=action.tool_name,
        error=error,
    )


def rejection_of(action, reason="too risky"):
    return UserRejectionEvent(
        id=f"rej-{action.id}",
        action_id=action.id,
        tool_call_id=action.tool_call_id,
        tool_name=action.tool_name,
        reason=reason,
    )


def condensation(event_id, forgotten, summary=None, offset=None):
    return CondensationEvent(
        id=event_id, forgotten_event_ids=tuple(forgotten), summary=summary, summary_offset=offset
    )


def call(action):
    return {
        "id": action.tool_call_id,
        "type": "function",
        "function": {"name": action.tool_name, "arguments": action.raw_arguments},
    }


def tool_msg(action, content=None):
    return {
        "role": "tool",
        "tool_call_id": action.tool_call_id,
        "name": action.tool_name,
        "content": content if content is not None else f"out {action.id}",
    }


def shape(messages):
    """A compact picture of the message sequence: role, plus call ids or the answered call."""
    picture = []
    for message in messages:
        if message.get("tool_calls"):
            picture.append("assistant[" + ",".join(c["id"] for c in message["tool_calls"]) + "]")
        elif message["role"] == "tool":
            picture.append(f"tool:{message['tool_call_id']}")
        else:
            picture.append(message["role"])
    return picture


X = act("x", "r", "cx", thought="Look at both files.")
Y = act("y", "r", "cy")


# -- the seed's worked example 2 ------------------------------------------------------------


def test_worked_example_2_raw_is_one_assistant_message_with_both_calls():
    messages = project_messages([user("u", "read a and b"), X, Y], raw=True)
    assert messages == [
        {"role": "user", "content": "read a and b"},
        {"role": "assistant", "content": "Look at both files.", "tool_calls": [call(X), call(Y)]},
    ]
    assert count_tool_calls(messages) == 2


def test_worked_example_2_once_both_answered_is_followed_by_two_tool_messages():
    messages = project_messages([user("u", "read a and b"), X, Y, obs(X), obs(Y)])
    assert messages == [
        {"role": "user", "content": "read a and b"},
        {"role": "assistant", "content": "Look at both files.", "tool_calls": [call(X), call(Y)]},
        tool_msg(X),
        tool_msg(Y),
    ]


def test_worked_example_2_not_sent_while_a_call_is_unanswered():
    assert project_messages([user("u"), X, Y, obs(Y)]) == [{"role": "user", "content": "hi"}]
    raw = project_messages([user("u"), X, Y, obs(Y)], raw=True)
    assert shape(raw) == ["user", "assistant[cx,cy]", "tool:cy"]


# -- message kinds ------------------------------------------------------------------------


def test_system_user_and_assistant_text_messages():
    path = [
        SystemPromptEvent(id="s", text="You are Treadle."),
        user("u", "hello"),
        agent_says("a", "Hi there."),
    ]
    assert project_messages(path) == [
        {"role": "system", "content": "You are Treadle."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi there."},
    ]


def test_reasoning_content_is_present_exactly_when_non_empty():
    path = [
        agent_says("a1", "one", reasoning="because"),
        agent_says("a2", "two", reasoning=""),
        agent_says("a3", "three"),
    ]
    assert project_messages(path) == [
        {"role": "assistant", "content": "one", "reasoning_content": "because"},
        {"role": "assistant", "content": "two"},
        {"role": "assistant", "content": "three"},
    ]
    first = act("p", "r1", reasoning="plan")
    blank = act("q", "r2", reasoning="")
    messages = project_messages([first, obs(first), blank, obs(blank)])
    assert messages[0]["reasoning_content"] == "plan"
    assert "reasoning_content" not in messages[2]


def test_images_make_content_parts():
    messages = project_messages([user("u", "what is this?", images=("data:image/png;base64,AA",))])
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
            ],
        }
    ]


def test_content_is_null_beside_tool_calls_without_text_and_arguments_are_the_raw_string():
    unparsable = ActionEvent(
        id="bad",
        llm_response_id="r",
        tool_call_id="c1",
        tool_name="terminal",
        arguments=None,
        raw_arguments='{"command": "ls',
        thought="   ",
    )
    messages = project_messages([unparsable, error_for(unparsable)])
    assert messages[0] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "terminal", "arguments": '{"command": "ls'},
            }
        ],
    }


# -- PROJECT-BATCH ------------------------------------------------------------------------


def test_batch_holds_k_calls_in_order():
    a, b, c = act("a", "r", thought="three at once"), act("b", "r"), act("c", "r")
    messages = project_messages([a, b, c, obs(a), obs(b), obs(c)])
    assert [tc["id"] for tc in messages[0]["tool_calls"]] == ["ca", "cb", "cc"]
    assert len(messages) == 4


def test_batch_is_ended_by_a_model_visible_event_even_with_the_same_response_id():
    path = [X, user("between", "stop"), Y]
    assert shape(project_messages(path, raw=True)) == ["assistant[cx]", "user", "assistant[cy]"]
    answered = [X, obs(X), Y, obs(Y)]
    assert shape(project_messages(answered)) == [
        "assistant[cx]",
        "tool:cx",
        "assistant[cy]",
        "tool:cy",
    ]


def test_events_that_are_not_model_visible_neither_appear_nor_end_a_batch():
    path = [
        X,
        PauseEvent(id="p"),
        StateChangeEvent(id="sc", key="status", value="paused"),
        ForeignEvent(id="f", source="hook", foreign_kind="HookExecutionEvent"),
        Y,
        obs(X),
        obs(Y),
    ]
    assert shape(project_messages(path)) == ["assistant[cx,cy]", "tool:cx", "tool:cy"]


def test_different_response_ids_make_different_batches():
    a, b = act("a", "r1"), act("b", "r2")
    assert shape(project_messages([a, b], raw=True)) == ["assistant[ca]", "assistant[cb]"]


# -- PROJECT-SHARED-TEXT ------------------------------------------------------------------


def test_shared_text_on_the_first_action_only_is_sent_once():
    first = act("a", "r", thought="shared", reasoning="why")
    second = act("b", "r")
    messages = project_messages([first, second, obs(first), obs(second)])
    assert messages[0]["content"] == "shared"
    assert messages[0]["reasoning_content"] == "why"
    assert json.dumps(messages).count("shared") == 1


@pytest.mark.parametrize("text", [{"thought": "again"}, {"reasoning": "again"}])
@pytest.mark.parametrize("raw", [False, True])
def test_text_on_a_later_action_of_a_batch_is_project_shared_text(text, raw):
    first = act("a", "r", thought="shared")
    second = act("b", "r", **text)
    with pytest.raises(ContractError) as caught:
        project_messages([first, second, obs(first), obs(second)], raw=raw)
    assert caught.value.contract == "PROJECT-SHARED-TEXT"
    assert caught.value.event_ids == ("a", "b")


def test_text_on_an_action_after_a_batch_break_is_a_new_batch_not_shared_text():
    first = act("a", "r", thought="one")
    again = act("b", "r", thought="two")
    messages = project_messages([first, obs(first), again, obs(again)])
    assert [m["content"] for m in messages if m["role"] == "assistant"] == ["one", "two"]


# -- PROJECT-DUP-CALL ---------------------------------------------------------------------


@pytest.mark.parametrize("raw", [False, True])
def test_two_calls_with_one_id_in_a_batch_is_project_dup_call(raw):
    first, twin = act("a", "r", "same"), act("b", "r", "same")
    with pytest.raises(ContractError) as caught:
        project_messages([first, twin, obs(first), obs(twin)], raw=raw)
    assert caught.value.contract == "PROJECT-DUP-CALL"
    assert caught.value.event_ids == ("a", "b")


def test_one_call_id_in_two_batches_is_not_dup_call_here():
    # Across responses it is LINK-UNIQUE, which the audit reports; the projection still
    # matches each result to its own action by action id.
    first, later = act("a", "r1", "same"), act("b", "r2", "same")
    messages = project_messages([first, obs(first, "A"), later, obs(later, "B")])
    assert [(m["role"], m["content"]) for m in messages if m["role"] == "tool"] == [
        ("tool", "A"),
        ("tool", "B"),
    ]


# -- PROJECT-RESULTS ----------------------------------------------------------------------


def test_results_follow_their_batch_in_arrival_order_matched_by_id():
    # y's result arrives first (worked example 3): arrival order, each with its own call id.
    messages = project_messages([X, Y, obs(Y, "from y"), obs(X, "from x")])
    assert messages[1:] == [tool_msg(Y, "from y"), tool_msg(X, "from x")]


def test_a_message_that_arrived_between_call_and_result_comes_after_the_results():
    path = [X, Y, obs(X), user("late", "also check c"), obs(Y)]
    messages = project_messages(path)
    assert shape(messages) == ["assistant[cx,cy]", "tool:cx", "tool:cy", "user"]
    assert messages[-1] == {"role": "user", "content": "also check c"}


def test_results_of_an_earlier_batch_go_back_to_it():
    a, b = act("a", "r1"), act("b", "r2")
    messages = project_messages([a, b, obs(b), obs(a)], raw=True)
    assert shape(messages) == ["assistant[ca]", "tool:ca", "assistant[cb]", "tool:cb"]


def test_agent_error_and_rejection_answer_their_calls():
    a = act("a", "r", tool="no_such_tool", thought="try")
    b = act("b", "r")
    messages = project_messages(
        [a, b, error_for(a, "Tool 'no_such_tool' not found"), rejection_of(b)]
    )
    assert messages[1:] == [
        {
            "role": "tool",
            "tool_call_id": "ca",
            "name": "no_such_tool",
            "content": "Tool 'no_such_tool' not found",
        },
        {
            "role": "tool",
            "tool_call_id": "cb",
            "name": "terminal",
            "content": "Action rejected: too risky",
        },
    ]


def test_results_are_never_merged_with_text():
    a = act("a", "r")
    messages = project_messages([a, obs(a, "output"), user("u1", "next"), user("u2", "more")])
    assert messages[1] == tool_msg(a, "output")
    assert messages[2]["role"] == "user"
    assert "output" not in json.dumps(messages[2])


def test_a_result_names_the_call_it_answers_not_its_own_mismatched_id():
    # LINK-ID broken (the audit's to report): the message still answers the call that was sent.
    a = act("a", "r")
    wrong = ObservationEvent(
        id="o", action_id="a", tool_call_id="not-ca", tool_name="terminal", content="x"
    )
    messages = project_messages([a, wrong])
    assert messages[1]["tool_call_id"] == "ca"


# -- PROJECT-USER-MERGE -------------------------------------------------------------------


def test_adjacent_user_messages_merge_into_parts():
    messages = project_messages([user("u1", "first"), user("u2", "second")])
    assert messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
        }
    ]


def test_user_merge_keeps_images_in_order():
    messages = project_messages([user("u1", "see", images=("http://i/1.png",)), user("u2", "ok")])
    assert messages[0]["content"] == [
        {"type": "text", "text": "see"},
        {"type": "image_url", "image_url": {"url": "http://i/1.png"}},
        {"type": "text", "text": "ok"},
    ]


def test_user_messages_apart_do_not_merge():
    path = [user("u1", "a"), agent_says("m", "b"), user("u2", "c")]
    assert [m["content"] for m in project_messages(path)] == ["a", "b", "c"]
    action = act("x", "r")
    after_tool = project_messages([action, obs(action), user("u3", "d")])
    assert shape(after_tool) == ["assistant[cx]", "tool:cx", "user"]


def test_user_messages_around_an_unsent_response_merge():
    # The SDK drops the unanswered response first, then merges what became adjacent.
    messages = project_messages([user("u1", "a"), X, Y, obs(X), user("u2", "b")])
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]


def test_user_messages_that_become_adjacent_behind_hoisted_results_merge():
    path = [X, Y, obs(X), user("u1", "a"), user("u2", "b"), obs(Y)]
    messages = project_messages(path)
    assert shape(messages) == ["assistant[cx,cy]", "tool:cx", "tool:cy", "user"]
    assert messages[-1]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]


# -- PROJECT-UNANSWERED -------------------------------------------------------------------


def test_a_response_with_an_unanswered_call_is_not_sent_with_its_results():
    a, b = act("a", "r1"), act("b", "r1")
    done = act("d", "r0")
    path = [user("u"), done, obs(done), a, b, obs(b)]
    assert shape(project_messages(path)) == ["user", "assistant[cd]", "tool:cd"]
    assert shape(project_messages(path, raw=True)) == [
        "user",
        "assistant[cd]",
        "tool:cd",
        "assistant[ca,cb]",
        "tool:cb",
    ]


def test_a_response_is_sent_once_every_call_is_answered():
    a, b = act("a", "r1"), act("b", "r1")
    assert count_tool_calls(project_messages([a, b, obs(b)])) == 0
    assert count_tool_calls(project_messages([a, b, obs(b), obs(a)])) == 2


def test_a_response_split_by_a_message_is_unsent_whole_when_one_part_is_unanswered():
    # One model response (one llm_response_id) is atomic, as the SDK's BatchAtomicity.
    path = [X, obs(X), user("u", "wait"), Y]
    assert shape(project_messages(path)) == ["user"]


def test_a_result_answering_no_call_is_dropped_but_kept_raw():
    stray = ObservationEvent(id="o", action_id="gone", tool_call_id="cgone", tool_name="t")
    assert project_messages([user("u"), stray]) == [{"role": "user", "content": "hi"}]
    raw = project_messages([user("u"), stray], raw=True)
    assert raw[1] == {"role": "tool", "tool_call_id": "cgone", "name": "t", "content": ""}


def test_a_stray_result_does_not_end_a_batch_it_is_dropped_from():
    stray = ObservationEvent(id="o", action_id="gone", tool_call_id="cgone", tool_name="t")
    path = [X, stray, Y, obs(X), obs(Y)]
    assert shape(project_messages(path)) == ["assistant[cx,cy]", "tool:cx", "tool:cy"]


def test_first_result_wins_for_a_call_answered_twice():
    # Crash recovery closes the call with an agent error, then the real observation arrives.
    a = act("a", "r")
    closed = error_for(a, "interrupted by a restart")
    late = obs(a, "late output")
    messages = project_messages([a, closed, late])
    assert messages[1:] == [tool_msg(a, "interrupted by a restart")]
    raw = project_messages([a, closed, late], raw=True)
    assert [m["content"] for m in raw[1:]] == ["interrupted by a restart", "late output"]


# -- PROJECT-CONSERVE ---------------------------------------------------------------------


def test_tool_calls_out_equal_actions_projected():
    a, b, c = act("a", "r1", thought="t"), act("b", "r1"), act("c", "r2")
    path = [user("u"), a, b, obs(b), obs(a), c, error_for(c)]
    messages = project_messages(path)
    assert len([m for m in messages if m["role"] == "assistant"]) == 2
    assert count_tool_calls(messages) == 3
    assert count_tool_calls([{"role": "user", "content": "x"}, {"tool_calls": None}]) == 0


# -- PROJECT-PURE -------------------------------------------------------------------------


def test_projection_changes_neither_the_path_nor_its_events():
    a, b = act("a", "r", thought="t"), act("b", "r")
    path = [
        user("u1", "a", images=("http://i/1.png",)),
        user("u2", "b"),
        a,
        b,
        obs(b),
        user("u3", "c"),
        obs(a),
        condensation("k", ["u1"], summary="earlier", offset=0),
    ]
    before = [event_to_json(event) for event in path]
    frozen_list = list(path)
    first = project_messages(path)
    first[0]["content"].append({"type": "text", "text": "mutated by the caller"})
    assert path == frozen_list
    assert [event_to_json(event) for event in path] == before
    assert project_messages(path) != first  # the caller's change did not reach the source


# -- condensation -------------------------------------------------------------------------


def test_condensation_forgets_events_and_puts_its_summary_at_its_offset():
    path = [
        SystemPromptEvent(id="s", text="sys"),
        user("u1", "old question"),
        agent_says("m1", "old answer"),
        condensation("k", ["u1", "m1"], summary="They talked.", offset=1),
        user("u2", "new question"),
    ]
    assert project_messages(path) == [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "They talked."},
                {"type": "text", "text": "new question"},
            ],
        },
    ]


@pytest.mark.parametrize(("summary", "offset"), [(None, 0), ("s", None), (None, None)])
def test_no_summary_without_both_summary_and_offset(summary, offset):
    path = [user("u1", "a"), agent_says("m", "b"), condensation("k", ["u1"], summary, offset)]
    assert project_messages(path) == [{"role": "assistant", "content": "b"}]


def test_condensation_acts_only_on_the_view_so_far():
    # An id forgotten before its event exists is not forgotten (the SDK's View).
    path = [user("u1", "a"), condensation("k", ["later"]), agent_says("later", "b")]
    assert [m["content"] for m in project_messages(path)] == ["a", "b"]


def test_summary_offset_past_the_end_stands_last():
    path = [agent_says("m", "b"), condensation("k", [], summary="s", offset=9)]
    assert project_messages(path)[-1] == {"role": "user", "content": "s"}


def test_a_later_condensation_can_forget_an_earlier_summary():
    path = [
        user("u1", "a"),
        condensation("k1", ["u1"], summary="first summary", offset=0),
        agent_says("m", "b"),
        condensation("k2", ["k1-summary"], summary="second summary", offset=0),
    ]
    assert [m["content"] for m in project_messages(path)] == ["second summary", "b"]


def test_condensation_never_splits_a_batch():
    a, b = act("a", "r", thought="t"), act("b", "r")
    path = [user("u", "go"), a, b, obs(a), obs(b), condensation("k", ["a"]), agent_says("m", "ok")]
    assert shape(project_messages(path)) == ["user", "assistant"]
    # Raw shows the view as condensation left it: the partly forgotten batch included.
    assert shape(project_messages(path, raw=True)) == [
        "user",
        "assistant[cb]",
        "tool:cb",
        "tool:ca",  # its call was forgotten: it stays where it arrived
        "assistant",
    ]


def test_condensation_never_separates_a_call_from_its_result():
    a = act("a", "r")
    forgot_call = [a, obs(a), condensation("k", ["a"]), user("u", "next")]
    assert shape(project_messages(forgot_call)) == ["user"]
    forgot_result = [a, obs(a), condensation("k", ["o-a"]), user("u", "next")]
    assert shape(project_messages(forgot_result)) == ["user"]


def test_a_broken_batch_that_condensation_forgot_is_no_error():
    first, second = act("a", "r", thought="x"), act("b", "r", thought="twice")
    path = [first, second, obs(first), obs(second), condensation("k", ["a", "b", "o-a", "o-b"])]
    assert project_messages(path) == []
    with pytest.raises(ContractError):
        project_messages(path[:-1])


def test_summary_stands_where_condensation_puts_it_among_tool_results():
    a = act("a", "r")
    path = [user("u1", "a"), a, obs(a), condensation("k", ["u1"], summary="s", offset=2)]
    assert shape(project_messages(path)) == ["assistant[ca]", "tool:ca", "user"]


# -- on the active path of a tree ---------------------------------------------------------


def test_projection_of_the_active_path_leaves_the_sibling_branch_out():
    root = MessageEvent(id="root", source="user", text="task", parent_id=ROOT)
    a = ActionEvent(
        id="a",
        parent_id="root",
        llm_response_id="r",
        tool_call_id="ca",
        tool_name="t",
        raw_arguments="{}",
    )
    old = MessageEvent(id="old", source="user", text="old attempt", parent_id="a")
    new = ObservationEvent(
        id="new", parent_id="a", action_id="a", tool_call_id="ca", tool_name="t", content="ok"
    )
    tree = EventTree([root, a, old, new])
    messages = project_messages(tree.path_to_root("new"))
    assert shape(messages) == ["user", "assistant[ca]", "tool:ca"]
    assert "old attempt" not in json.dumps(messages)
