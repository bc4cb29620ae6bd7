"""The condensation policy as a pure function: which span of a condensed view to forget.

Keeps the head (the system prompt and the first user message), keeps a recent window, and
forgets the span between, cut only where no call is separated from its result, no response's
batch is split and no unanswered call is forgotten (CONDENSE-SPLIT, CONDENSE-PENDING). Whether
a condensation may be made at all (CONDENSE-LOOP) is ``may_condense``. No I/O, no model call:
``treadle.runtime.condense.condenser`` writes the summary and the event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from treadle.events.model import (
    MODEL_VISIBLE_KINDS,
    RESULT_KINDS,
    ActionEvent,
    EventBase,
    FinalResult,
)
from treadle.events.projection import ViewItem

__all__ = ["CondensationPlan", "head_end", "may_condense", "plan_condensation"]


@dataclass(frozen=True, slots=True)
class CondensationPlan:
    """What to forget: ``view[head:tail]``; the summary then stands at ``head`` among the
    items left (the condensation event's ``summary_offset``)."""

    head: int
    tail: int
    forgotten: tuple[ViewItem, ...]

    @property
    def summary_offset(self) -> int:
        return self.head

    @property
    def forgotten_ids(self) -> tuple[str, ...]:
        return tuple(item.id for item in self.forgotten)


def may_condense(path: Sequence[EventBase]) -> bool:
    """CONDENSE-LOOP: False when the last condensation on ``path`` has no model-visible
    event after it (condensing again could only repeat it)."""
    for event in reversed(path):
        if event.kind == "condensation":
            return False
        if event.kind in MODEL_VISIBLE_KINDS:
            return True
    return True


def plan_condensation(
    view: Sequence[ViewItem], tokens: Sequence[int], *, keep_recent_tokens: int
) -> CondensationPlan | None:
    """The span of ``view`` to forget, or None when nothing can be.

    ``tokens[i]`` is the size of ``view[i]``. The recent window is the shortest tail that
    holds ``keep_recent_tokens``, widened to the nearest cut that splits nothing; when that
    would leave no tail at all, the last whole unit (a batch with its results) is kept.
    """
    count = len(view)
    if count != len(tokens):
        raise ValueError(f"{count} view items but {len(tokens)} token counts")
    valid = _valid_cuts(view)
    head = _first_valid(valid, head_end(view))
    if head is None:
        return None
    start, kept = count, 0
    while start > head and kept + tokens[start - 1] <= keep_recent_tokens:
        start -= 1
        kept += tokens[start]
    tail = _first_valid(valid, start)
    if tail is None or tail == count:  # keep at least the last unit: the latest context
        tail = next((cut for cut in range(count - 1, head, -1) if valid[cut]), None)
    if tail is None or tail <= head:
        return None
    return CondensationPlan(head, tail, tuple(view[head:tail]))


def head_end(view: Sequence[ViewItem]) -> int:
    """Where the kept head ends: just after the first user message (after the leading system
    prompts when there is none)."""
    for index, item in enumerate(view):
        if item.kind == "message" and getattr(item, "role", None) == "user":
            return index + 1
    index = 0
    while index < len(view) and view[index].kind == "system_prompt":
        index += 1
    return index


def _first_valid(valid: bytearray, start: int) -> int | None:
    index = valid.find(1, start)
    return None if index < 0 else index


def _valid_cuts(view: Sequence[ViewItem]) -> bytearray:
    """``valid[c]`` (c in 0..len): cutting before ``view[c]`` separates no call from its
    result and splits no response. An action with no result in the view can never be
    forgotten: nothing after it may be cut either."""
    count = len(view)
    unbounded = count + 1
    low: dict[str, int] = {}  # response id -> first index of its actions and their results
    high: dict[str, int] = {}  # response id -> last index (unbounded while a call is open)
    response_of: dict[str, str] = {}  # action id -> response id
    open_by_call: dict[str, str] = {}  # tool call id -> open action id
    open_count: dict[str, int] = {}  # response id -> calls without a result in the view
    for index, item in enumerate(view):
        kind = item.kind
        if kind == "action":
            action = cast(ActionEvent, item)
            response = action.llm_response_id
            low.setdefault(response, index)
            high[response] = index
            response_of[action.id] = response
            open_by_call[action.tool_call_id] = action.id
            open_count[response] = open_count.get(response, 0) + 1
        elif kind in RESULT_KINDS:
            result = cast(FinalResult, item)
            action_id = result.action_id
            if action_id is None or action_id not in response_of:
                action_id = open_by_call.get(result.tool_call_id)
            if action_id is None or action_id not in response_of:
                continue  # answers no call in the view: a unit of its own
            response = response_of[action_id]
            high[response] = index
            if open_by_call.get(result.tool_call_id) == action_id:
                del open_by_call[result.tool_call_id]
                open_count[response] -= 1
    marks = [0] * (count + 2)
    for response, first in low.items():
        last = unbounded if open_count[response] else high[response]
        if last > first:  # no cut in (first, last]
            marks[first + 1] += 1
            marks[min(last, count) + 1] -= 1
    valid = bytearray(count + 1)
    depth = 0
    for cut in range(count + 1):
        depth += marks[cut]
        valid[cut] = depth == 0
    return valid
