"""STUCK detection: the agent repeats the same calls and gets the same results.

Reads only the tail of the active path that holds its last few model responses (a step's check
costs a handful of events, not the path); three identical responses in a row means stuck.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from treadle.events.model import (
    RESULT_KINDS,
    ActionEvent,
    AgentErrorEvent,
    EventBase,
    FinalResult,
    MessageEvent,
    ObservationEvent,
)

REPEATS = 3
TAIL_LIMIT = 200
"""At most this many events are read back from the end of the path."""


def _result_text(event: FinalResult) -> str:
    if isinstance(event, ObservationEvent):
        return event.content
    if isinstance(event, AgentErrorEvent):
        return event.error
    return event.reason


Signature = tuple[tuple[str, str | None, str | None], ...]
"""A response's calls (name, raw arguments, result), or its message ("message", source, text)."""


def response_signatures(path: Sequence[EventBase]) -> list[Signature]:
    """One signature per model response on ``path``: its calls and their results, in order."""
    responses: dict[str, list[ActionEvent | MessageEvent]] = {}
    call_response: dict[str, str] = {}
    results: dict[str, str] = {}
    for event in path:
        if isinstance(event, ActionEvent):
            responses.setdefault(event.llm_response_id, []).append(event)
            call_response[event.tool_call_id] = event.llm_response_id
        elif event.kind in RESULT_KINDS:
            result = cast(FinalResult, event)
            results[result.tool_call_id] = _result_text(result)
        elif event.kind == "message":
            responses.setdefault(f"message:{event.id}", []).append(cast(MessageEvent, event))
    signatures: list[Signature] = []
    for events in responses.values():
        signatures.append(
            tuple(
                (e.tool_name, e.raw_arguments, results.get(e.tool_call_id))
                if isinstance(e, ActionEvent)
                else ("message", e.source, e.text)
                for e in events
            )
        )
    return signatures


def _response_key(event: EventBase) -> str | None:
    """The model response ``event`` belongs to (a message is one of its own), else None."""
    if isinstance(event, ActionEvent):
        return event.llm_response_id
    if event.kind == "message":
        return f"message:{event.id}"
    return None


def recent_responses(
    path: Sequence[EventBase], count: int, limit: int = TAIL_LIMIT
) -> Sequence[EventBase]:
    """The shortest tail of ``path`` holding its last ``count`` model responses with their
    results (a response's results follow its calls), read back at most ``limit`` events."""
    seen: set[str] = set()
    start = max(0, len(path) - limit)
    for index in range(len(path) - 1, start - 1, -1):
        key = _response_key(path[index])
        if key is None or key in seen:
            continue
        if len(seen) == count:
            return path[index + 1 :]
        seen.add(key)
    return path[start:]


def is_stuck(path: Sequence[EventBase], repeats: int = REPEATS) -> bool:
    """True when the last ``repeats`` model responses of ``path`` are tool calls identical in
    calls and results."""
    signatures = response_signatures(recent_responses(path, repeats))
    if len(signatures) < repeats:
        return False
    last = signatures[-repeats:]
    has_calls = all(part[0] != "message" for part in last[0])
    return has_calls and all(signature == last[0] for signature in last)
