"""How results answer actions (LINK-*): matching by id along one path, and what is pending.

Results may arrive in any order; they are matched by id, never by position (LINK-PENDING).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from treadle.events.model import RESULT_KINDS, ActionEvent, EventBase, FinalResult


def result_call_id(event: EventBase) -> str | None:
    """The tool call a final result answers, or None when ``event`` is not a final result."""
    if event.kind in RESULT_KINDS:
        return cast(FinalResult, event).tool_call_id
    return None


class Linker:
    """The open actions of one path, fed its events in path order: the one place that says
    which action a result answers.

    An observation or rejection answers its ``action_id``; an agent error answers by
    ``tool_call_id`` (its action may have no parsed arguments); either way the ``action_id``
    is tried first, then the open action with the result's ``tool_call_id``.
    """

    __slots__ = ("_open_by_call", "open_actions")

    def __init__(self) -> None:
        self.open_actions: dict[str, ActionEvent] = {}
        """Actions with no final result yet, in path order."""
        self._open_by_call: dict[str, str] = {}

    def feed(self, event: EventBase) -> str | None:
        """Take the next event of the path; for a final result, the id of the action it
        answers (None when it answers no open action: a duplicate or a stray result)."""
        if isinstance(event, ActionEvent):
            self.open_actions[event.id] = event
            self._open_by_call[event.tool_call_id] = event.id
            return None
        if event.kind not in RESULT_KINDS:
            return None
        result = cast(FinalResult, event)
        open_actions, open_by_call = self.open_actions, self._open_by_call
        action_id = result.action_id
        if action_id is None or action_id not in open_actions:
            action_id = open_by_call.get(result.tool_call_id)
        answered = open_actions.pop(action_id, None) if action_id is not None else None
        if answered is None:  # a stale id left by a duplicated action id (APPEND-DUP-ID)
            return None
        if open_by_call.get(answered.tool_call_id) == action_id:
            del open_by_call[answered.tool_call_id]
        return action_id


def pending_actions(path: Iterable[EventBase]) -> list[ActionEvent]:
    """Actions on ``path`` (root first) with no final result after them, in path order.
    Pending is not a violation."""
    linker = Linker()
    for event in path:
        linker.feed(event)
    return list(linker.open_actions.values())
