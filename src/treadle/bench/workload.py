"""Synthetic logs of a realistic mix for benchmarks: ~900 bytes of JSON per event.

A user message, then model responses of 1-3 parallel tool calls each answered by an
observation, and now and then an agent text answer; one chain, appended in order. Response and
tool call ids are random, as a model's are: unique across every log built here, whatever the
seed, so that separately built chunks of one conversation never reuse a call id (LINK-UNIQUE).
A log cut at ``count`` may end inside a response (its calls not yet answered).
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
    return next(realistic_chunks(count, count, seed=seed), [])


def realistic_chunks(
    total: int, size: int, *, seed: int, first_parent: str = ROOT
) -> Iterator[list[Event]]:
    """One chain of ``total`` events in lists of up to ``size`` (a million-event conversation
    never sits in memory at once). One stream cut into pieces: a response that straddles two
    pieces is whole in the chain (its calls are answered), as in a log a live run appends."""
    rng = random.Random(seed)
    stream = _stream(rng)
    parent = first_parent
    made = 0
    while made < total:
        events: list[Event] = []
        for event in stream:
            event = event.model_copy(update={"parent_id": parent})
            events.append(event)
            parent = event.id
            if len(events) >= min(size, total - made):
                break
        made += len(events)
        yield events


def _call_id(rng: random.Random) -> str:
    # 96 random bits: the chance that two of a billion ids collide is below 1e-10.
    return f"{rng.getrandbits(96):024x}"


def _stream(rng: random.Random) -> Iterator[Event]:
    step = 0
    while True:
        step += 1
        if step % 10 == 1:
            yield MessageEvent(source="user", text=_text(rng, 600))
        calls = rng.choice((1, 1, 2, 3))
        response = f"resp-{_call_id(rng)}"
        actions = []
        for index in range(calls):
            command = _text(rng, 140)
            actions.append(
                ActionEvent(
                    llm_response_id=response,
                    tool_call_id=f"call_{_call_id(rng)}",
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
