"""STUCK detection: the agent repeats the same calls and gets the same results.

Reads only the tail of the active path; three identical model responses in a row means stuck.
"""

from __future__ import annotations

from collections.abc import Sequence

from treadle.events.model import RESULT_KINDS, EventBase

REPEATS = 3


def _result_text(event: EventBase) -> str:
    return (
        getattr(event, "content", None)
        or getattr(event, "error", None)
        or getattr(event, "reason", "")
    )


def response_signatures(path: Sequence[EventBase]) -> list[tuple]:
    """One signature per model response on ``path``: its calls and their results, in order."""
    responses: dict[str, list] = {}
    call_response: dict[str, str] = {}
    results: dict[str, str] = {}
    for event in path:
        if event.kind == "action":
            responses.setdefault(event.llm_response_id, []).append(event)  # type: ignore[attr-defined]
            call_response[event.tool_call_id] = event.llm_response_id  # type: ignore[attr-defined]
        elif event.kind in RESULT_KINDS:
            results[event.tool_call_id] = _result_text(event)  # type: ignore[attr-defined]
        elif event.kind == "message":
            responses.setdefault(f"message:{event.id}", []).append(event)
    signatures = []
    for events in responses.values():
        signatures.append(
            tuple(
                (e.tool_name, e.raw_arguments, results.get(e.tool_call_id))  # type: ignore[attr-defined]
                if e.kind == "action"
                else ("message", e.source, e.text)  # type: ignore[attr-defined]
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
