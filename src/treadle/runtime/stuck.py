"""STUCK detection: the agent repeats the same calls and gets the same results.

Reads only the tail of the active path; three identical model responses in a row means stuck.
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
    ObservationEvent,
)

REPEATS = 3


def _result_text(event: FinalResult) -> str:
    if isinstance(event, ObservationEvent):
        return event.content
    if isinstance(event, AgentErrorEvent):
        return event.error
    return event.reason


def response_signatures(path: Sequence[EventBase]) -> list[tuple]:
    """One signature per model response on ``path``: its calls and their results, in order."""
    responses: dict[str, list] = {}
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
            responses.setdefault(f"message:{event.id}", []).append(event)
    signatures = []
    for events in responses.values():
        signatures.append(
            tuple(
                (e.tool_name, e.raw_arguments, results.get(e.tool_call_id))
                if e.kind == "action"
                else ("message", e.source, e.text)
                for e in events
            )
        )
    return signatures


def is_stuck(path_tail: Sequence[EventBase], repeats: int = REPEATS) -> bool:
    """True when the last ``repeats`` model responses are tool calls identical in calls and results."""
    signatures = response_signatures(path_tail)
    if len(signatures) < repeats:
        return False
    last = signatures[-repeats:]
    has_calls = all(part[0] != "message" for part in last[0])
    return has_calls and all(signature == last[0] for signature in last)
