"""Incremental projection equals the full projection at every point of a growing path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    MessageEvent,
    ObservationEvent,
    UserRejectionEvent,
)
from treadle.events.projection import project_messages
from treadle.events.projection_cache import IncrementalProjection


def action(response: str, call: str, first: bool) -> ActionEvent:
    return ActionEvent(
        llm_response_id=response,
        tool_call_id=call,
        tool_name="terminal",
        arguments={"command": call},
        raw_arguments=f'{{"command": "{call}"}}',
        thought="thinking" if first else "",
    )


def answer(act: ActionEvent, how: int):
    if how == 0:
        return ObservationEvent(
            action_id=act.id, tool_call_id=act.tool_call_id, tool_name=act.tool_name, content="ok"
        )
    if how == 1:
        return AgentErrorEvent(tool_call_id=act.tool_call_id, tool_name=act.tool_name, error="bad")
    return UserRejectionEvent(
        action_id=act.id, tool_call_id=act.tool_call_id, tool_name=act.tool_name
    )


@st.composite
def growing_paths(draw):
    events = []
    turns = draw(st.integers(min_value=1, max_value=12))
    for turn in range(turns):
        step = draw(st.sampled_from(["user", "agent", "batch", "batch", "condense"]))
        if step == "user":
            events.append(MessageEvent(source="user", text=f"u{turn}"))
        elif step == "agent":
            events.append(MessageEvent(source="agent", text=f"a{turn}"))
        elif step == "condense" and events:
            forgotten = draw(
                st.lists(st.sampled_from([e.id for e in events]), max_size=3, unique=True)
            )
            events.append(
                CondensationEvent(
                    forgotten_event_ids=tuple(forgotten), summary=f"s{turn}", summary_offset=0
                )
            )
        else:
            calls = [
                action(f"r{turn}", f"c{turn}-{i}", i == 0) for i in range(draw(st.integers(1, 3)))
            ]
            events.extend(calls)
            order = draw(st.permutations(calls))
            answered = draw(st.integers(min_value=0, max_value=len(calls)))
            for index, act in enumerate(order[:answered]):
                if draw(st.booleans()) and index:
                    events.append(MessageEvent(source="user", text=f"between {turn}"))
                events.append(answer(act, draw(st.integers(0, 2))))
    return events


@given(growing_paths())
def test_incremental_equals_full_after_every_event(events):
    cache = IncrementalProjection()
    for end in range(1, len(events) + 1):
        path = events[:end]
        assert cache.project(path) == project_messages(path)


@given(growing_paths(), st.integers(min_value=1, max_value=40))
def test_switching_to_another_branch_falls_back_to_a_full_pass(events, cut):
    cache = IncrementalProjection()
    cache.project(events)
    other = [*events[: cut % len(events)], MessageEvent(source="user", text="other branch")]
    assert cache.project(other) == project_messages(other)


def test_the_cached_prefix_is_not_changed_by_callers():
    first = action("r", "c", True)
    path = [MessageEvent(source="user", text="go"), first, answer(first, 0)]
    cache = IncrementalProjection()
    cache.project(path).append({"role": "user", "content": "injected"})
    assert cache.project(path) == project_messages(path)
