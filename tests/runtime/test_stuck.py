"""STUCK detection (runtime/stuck.py) reads only the tail holding the last responses: the same
answer as over the whole path, and a step's check reads a handful of events, not the path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from treadle.events.model import ActionEvent, EventBase, MessageEvent, ObservationEvent
from treadle.runtime.stuck import REPEATS, is_stuck, recent_responses, response_signatures


def response(number: int, calls: list[tuple[str, str]]) -> list[EventBase]:
    """A model response's calls ((command, result) pairs) followed by their results."""
    actions = [
        ActionEvent(
            llm_response_id=f"r{number}",
            tool_call_id=f"r{number}-c{index}",
            tool_name="terminal",
            raw_arguments=command,
        )
        for index, (command, _result) in enumerate(calls)
    ]
    results = [
        ObservationEvent(
            action_id=action.id,
            tool_call_id=action.tool_call_id,
            tool_name="terminal",
            content=result,
        )
        for action, (_command, result) in zip(actions, calls, strict=True)
    ]
    return [*actions, *results]


def whole_path_answer(path: list[EventBase]) -> bool:
    """The rule over every response of the path (what the tail must agree with)."""
    signatures = response_signatures(path)
    if len(signatures) < REPEATS:
        return False
    last = signatures[-REPEATS:]
    return all(part[0] != "message" for part in last[0]) and all(s == last[0] for s in last)


def test_three_identical_responses_after_a_long_history_read_only_their_events():
    path: list[EventBase] = []
    for number in range(5000):
        path += response(number, [(f"echo {number}", f"{number}")])
    for number in range(5000, 5000 + REPEATS):
        path += response(number, [("echo same", "same"), ("ls", "a.txt")])
    assert is_stuck(path)
    # Their calls and results, and the result before them: not the 15,000 events before.
    assert len(recent_responses(path, REPEATS)) == REPEATS * 4 + 1
    assert not is_stuck(path[:-1])  # the last result missing: not the same


def test_a_user_message_between_the_repeats_is_not_stuck():
    path: list[EventBase] = [*response(0, [("echo same", "same")])]
    path.append(MessageEvent(source="user", text="try again"))
    for number in (1, 2):
        path += response(number, [("echo same", "same")])
    assert not is_stuck(path)
    path += response(3, [("echo same", "same")])
    assert is_stuck(path)


@given(
    st.lists(
        st.one_of(
            st.none(),  # a user message
            st.lists(
                st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"])),
                min_size=1,
                max_size=2,
            ),
        ),
        max_size=12,
    )
)
def test_the_tail_gives_the_same_answer_as_the_whole_path(responses):
    path: list[EventBase] = []
    for number, calls in enumerate(responses):
        if calls is None:
            path.append(MessageEvent(source="user", text="go on"))
        else:
            path += response(number, calls)
    assert is_stuck(path) == whole_path_answer(path)
