"""Synthetic logs of a realistic mix for benchmarks: ~900 bytes of JSON per event.

A user message, then model responses of 1-3 parallel tool calls each answered by an
observation, and now and then an agent text answer; one chain, appended in order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from treadle.events.model import (
    ROOT,
    ActionEvent,
    Event,
    MessageEvent,
    ObservationEvent,
)

_WORDS = [
    "the",
    "file",
    "parser",
    "returns",
    "tokens",
    "while",
    "tests",
    "check",
    "every",
    "branch",
    "of",
    "the",
    "module",
    "and",
    "its",
    "error",
    "paths",
    "before",
    "the",
    "agent",
    "edits",
    "anything",
    "else",
    "in",
    "the",
    "workspace",
    "tree",
]


def _text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def realistic_events(count: int, *, seed: int = 7) -> list[Event]:
    """``count`` events forming one chain (each event's parent is the previous one)."""
    rng = random.Random(seed)
    events: list[Event] = []
    parent = ROOT
    for event in _stream(rng):
        if len(events) >= count:
            break
        event = event.model_copy(update={"parent_id": parent})
        events.append(event)
        parent = event.id
    return events


def _stream(rng: random.Random) -> Iterator[Event]:
    step = 0
    while True:
        step += 1
        if step % 10 == 1:
            yield MessageEvent(source="user", text=_text(rng, 600))
        calls = rng.choice((1, 1, 2, 3))
        response = f"resp-{step}"
        actions = []
        for index in range(calls):
            command = _text(rng, 140)
            actions.append(
                ActionEvent(
                    llm_response_id=response,
                    tool_call_id=f"call-{step}-{index}",
                    tool_name="terminal",
                    arguments={"command": command},
                    raw_arguments=f'{{"command": "{command}"}}',
                    thought=_text(rng, 300) if index == 0 else "",
                )
            )
        yield from actions
        for action in actions:
            yield ObservationEvent(
                action_id=action.id,
                tool_call_id=action.tool_call_id,
                tool_name=action.tool_name,
                content=_text(rng, 620),
                data={"exit_code": 0},
            )
        if step % 10 == 0:
            yield MessageEvent(source="agent", text=_text(rng, 500))


def light_chain(count: int) -> list[Event]:
    """A long chain of small events built without validation, for path-window timing."""
    events: list[Event] = []
    parent = ROOT
    for index in range(count):
        event_id = f"e{index}"
        events.append(
            MessageEvent.model_construct(
                id=event_id, source="user", text="x", parent_id=parent, kind="message"
            )
        )
        parent = event_id
    return events
