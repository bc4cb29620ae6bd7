"""How results answer actions (LINK-*): matching by id along one path, and what is pending.

Results may arrive in any order; they are matched by id, never by position (LINK-PENDING).
"""

from __future__ import annotations

from collections.abc import Iterable

from treadle.events.model import RESULT_KINDS, ActionEvent, EventBase


def result_call_id(event: EventBase) -> str | None:
    """The tool call a final result answers, or None when ``event`` is not a final result."""
    if event.kind in RESULT_KINDS:
        return event.tool_call_id  # type: ignore[attr-defined]
    return None


def pending_actions(path: Iterable[EventBase]) -> list[ActionEvent]:
    """Actions on ``path`` (root first) with no final result after them, in path order.

    An observation or rejection answers its ``action_id``; an agent error answers by
    ``tool_call_id`` (its action may have no parsed arguments). Pending is not a violation.
    """
    open_actions: dict[str, ActionEvent] = {}
    open_by_call: dict[str, str] = {}
    for event in path:
        kind = event.kind
        if kind == "action":
            open_actions[event.id] = event  # type: ignore[assignment]
            open_by_call[event.tool_call_id] = event.id  # type: ignore[attr-defined]
        elif kind in RESULT_KINDS:
            action_id = getattr(event, "action_id", None)
            if action_id is None or action_id not in open_actions:
                action_id = open_by_call.get(event.tool_call_id)  # type: ignore[attr-defined]
            if action_id is not None:
                answered = open_actions.pop(action_id, None)
                if answered is not None and open_by_call.get(answered.tool_call_id) == action_id:
                    del open_by_call[answered.tool_call_id]
    return list(open_actions.values())
