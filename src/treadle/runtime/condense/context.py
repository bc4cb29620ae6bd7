"""What the model's context holds now, followed along the active path as it grows.

``ContextView`` keeps the condensed view of the path (as ``projection.condensed_view``), the
token size of each item (counted once per id with the model's counter, then cached), their
total, the number of model responses and the tool call ids on the path (forgotten ones included:
the scripted model's place; LINK-UNIQUE for new calls) and whether a condensation may be made now (CONDENSE-LOOP). A step that appends events
costs O(new events); a condensation O(view); a path that is not an extension (a branch switch)
is read again from its root.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from treadle.events.model import MODEL_VISIBLE_KINDS, CondensationEvent, EventBase
from treadle.events.projection import Summary, ViewItem
from treadle.runtime.llm.base import ResponseCounter

TokenCount = Callable[[str], int]
"""Tokens of a text for the model (LiteLLM's counter)."""

MESSAGE_OVERHEAD_TOKENS = 4
"""What a chat message costs beyond its text (role, separators), as providers count it."""


def item_text(item: ViewItem) -> str:
    """The text of ``item`` that the model is sent (what its tokens are counted on)."""
    kind = item.kind
    event: Any = item
    if kind == "message":
        return str(event.text + "".join(event.extended_content) + (event.reasoning or ""))
    if kind == "system_prompt":
        tools = json.dumps(list(event.tools)) if event.tools else ""
        return str(event.text + (event.context or "") + tools)
    # A call and its result are counted with their ids and tool name, as they are sent.
    if kind == "action":
        return (
            f"function {event.tool_call_id} {event.tool_name} {event.raw_arguments} "
            f"{event.thought}{event.reasoning or ''}"
        )
    if kind == "observation":
        return f"{event.tool_call_id} {event.tool_name} {event.content}"
    if kind == "agent_error":
        return f"{event.tool_call_id} {event.tool_name} {event.error}"
    if kind == "user_rejection":
        return f"{event.tool_call_id} {event.tool_name} Action rejected: {event.reason}"
    if kind == "summary":
        return str(event.text)
    return ""


class TokenSizes:
    """Each item's tokens, counted once with ``count`` and cached by id."""

    def __init__(self, count: TokenCount) -> None:
        self._count = count
        self._sizes: dict[str, int] = {}

    def size(self, item: ViewItem) -> int:
        size = self._sizes.get(item.id)
        if size is None:
            size = self._sizes[item.id] = MESSAGE_OVERHEAD_TOKENS + self._count(item_text(item))
        return size


class ContextView:
    """The condensed view of a path, its token total and its model responses (module doc)."""

    def __init__(self, sizes: TokenSizes | None = None) -> None:
        self._sizes = sizes
        self._length = 0
        self._last_id: str | None = None
        self.view: list[ViewItem] = []
        self.total = 0
        """Tokens of the view's items (0 while no counter is attached)."""
        self.condensations = 0
        self.may_condense = True
        """CONDENSE-LOOP: False right after a condensation, until a model-visible event."""
        self.call_ids: set[str] = set()
        """The tool call ids on the path, forgotten ones included (LINK-UNIQUE: a new call
        must not reuse one). Read it, never change it."""
        self._responses = ResponseCounter()

    @property
    def model_responses(self) -> int:
        """The model responses on the path, forgotten ones included (``ResponseCounter``)."""
        return self._responses.count

    def attach(self, sizes: TokenSizes) -> None:
        """Count tokens from now on (e.g. when a provider refused a request)."""
        if self._sizes is None:
            self._sizes = sizes
            self.total = sum(sizes.size(item) for item in self.view)

    @property
    def counting(self) -> bool:
        return self._sizes is not None

    def size(self, item: ViewItem) -> int:
        """``item``'s tokens (0 while no counter is attached)."""
        return 0 if self._sizes is None else self._sizes.size(item)

    def item_sizes(self) -> list[int]:
        sizes = self._sizes
        if sizes is None:
            raise RuntimeError("no token counter attached")
        return [sizes.size(item) for item in self.view]

    def follow(self, path: Sequence[EventBase]) -> None:
        """Bring the view up to ``path`` (root first)."""
        length = self._length
        extends = 0 < length <= len(path) and path[length - 1].id == self._last_id
        if not extends:
            self._reset()
            length = 0
        for event in path[length:]:
            self._add(event)
        self._length = len(path)
        self._last_id = path[-1].id if path else None

    def _reset(self) -> None:
        self.view, self.total, self.condensations = [], 0, 0
        self.may_condense = True
        self.call_ids = set()
        self._responses = ResponseCounter()

    def _add(self, event: EventBase) -> None:
        kind = event.kind
        if kind == "condensation":
            self._responses.add(event)  # closes a batch, as in the projection
            self._condense(event)  # type: ignore[arg-type]  # its kind says so
            return
        if kind not in MODEL_VISIBLE_KINDS:
            return
        self.may_condense = True
        self.view.append(event)
        self._responses.add(event)
        if self._sizes is not None:
            self.total += self._sizes.size(event)
        if kind == "action":
            self.call_ids.add(event.tool_call_id)  # type: ignore[attr-defined]

    def _condense(self, condensation: CondensationEvent) -> None:
        forgotten = frozenset(condensation.forgotten_event_ids)
        kept = [item for item in self.view if item.id not in forgotten]
        if condensation.summary is not None and condensation.summary_offset is not None:
            kept.insert(condensation.summary_offset, Summary(condensation.id, condensation.summary))
        self.view = kept
        if self._sizes is not None:
            sizes = self._sizes
            self.total = sum(sizes.size(item) for item in kept)
        self.condensations += 1
        self.may_condense = False
