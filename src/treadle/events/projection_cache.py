"""Incremental projection: re-project only what a path added since a clean cut.

A path can be cut at a point where every call is answered and the last message is not a user
message: nothing there is pending, deferred or mergeable, so projecting the tail alone and
appending it gives exactly ``project_messages(path)``. A condensation in the tail (which may
forget earlier events) or a path that no longer starts with the cached prefix means a full pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from treadle.events.links import pending_actions
from treadle.events.model import EventBase
from treadle.events.projection import Message, project_messages


class IncrementalProjection:
    """``project(path)`` equals ``project_messages(path)``; amortised cost is O(new events)."""

    def __init__(self) -> None:
        self._prefix_length = 0
        self._prefix_last_id: str | None = None
        self._prefix_messages: list[Message] = []

    def project(self, path: Sequence[EventBase]) -> list[Message]:
        start = self._prefix_length if self._extends_prefix(path) else 0
        tail = path[start:]
        if start and any(event.kind == "condensation" for event in tail):
            start, tail = 0, path
        tail_messages = project_messages(tail)
        messages = (self._prefix_messages if start else []) + tail_messages
        if self._is_clean_cut(tail, messages):
            self._prefix_length = len(path)
            self._prefix_last_id = path[-1].id if path else None
            self._prefix_messages = messages
        elif not start:
            self._prefix_length, self._prefix_last_id, self._prefix_messages = 0, None, []
        # Callers may extend the list they get; the cached prefix must stay as it is.
        return list(messages)

    def _extends_prefix(self, path: Sequence[EventBase]) -> bool:
        # A node's path to the root is unique, so the same event at the same position means
        # the same prefix.
        length = self._prefix_length
        return 0 < length <= len(path) and path[length - 1].id == self._prefix_last_id

    @staticmethod
    def _is_clean_cut(tail: Sequence[EventBase], messages: list[Message]) -> bool:
        if not messages or messages[-1]["role"] == "user":
            return False
        return not pending_actions(tail)
