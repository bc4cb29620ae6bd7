"""The log as a tree: resolves TREE-PARENT once, walks active paths, finds heads and branches.

``EventTree`` indexes events in append order; walking a path costs O(path) or O(limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from treadle.errors import TreeError
from treadle.events.model import ROOT, EventBase

NO_PARENT = -1
"""Parent index of a root."""
MISSING_PARENT = -2
"""Parent index of an event whose explicit parent is not in the log (TREE-MISSING)."""


def resolved_parent_id(event: EventBase, previous_id: str | None) -> str | None:
    """TREE-PARENT for one event of a log read in append order: its explicit parent, None
    for an explicit root (``"__root__"``), else (legacy, no parent) ``previous_id``, the id of
    the event appended just before (None for the first). ``EventTree`` applies the same rule
    by position."""
    parent_id = event.parent_id
    if parent_id is None:
        return previous_id
    return None if parent_id == ROOT else parent_id


class TreeNode(Protocol):
    """What the tree reads of an event: an event itself, or a store's payload-free shape."""

    @property
    def id(self) -> str: ...
    @property
    def parent_id(self) -> str | None: ...
    @property
    def kind(self) -> str: ...


NodeT = TypeVar("NodeT", bound=TreeNode)


class EventTree(Generic[NodeT]):
    """An index over ``events`` in append order (position = seq).

    Parent resolution (TREE-PARENT): an explicit id is the parent; ``"__root__"`` is a new root;
    an absent parent is the event appended just before (legacy), or a root when first.
    A duplicated id resolves to its first occurrence, as in the store, which refuses the second.
    """

    __slots__ = ("_children", "_index", "_parent", "duplicate_positions", "events")

    def __init__(self, events: Sequence[NodeT]) -> None:
        self.events: Sequence[NodeT] = events
        index: dict[str, int] = {}
        duplicates: list[int] = []
        for position, event in enumerate(events):
            if index.setdefault(event.id, position) != position:
                duplicates.append(position)
        self._index = index
        self.duplicate_positions: tuple[int, ...] = tuple(duplicates)
        """Positions of events whose id an earlier event already has (APPEND-DUP-ID)."""
        parents: list[int] = []
        for position, event in enumerate(events):
            parent_id = event.parent_id
            if parent_id is None:
                parents.append(
                    position - 1
                )  # legacy: previous event; -1 is NO_PARENT for the first
            elif parent_id == ROOT:
                parents.append(NO_PARENT)
            else:
                parents.append(index.get(parent_id, MISSING_PARENT))
        self._parent = parents
        self._children: list[list[int]] | None = None

    # -- lookup ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.events)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._index

    def position(self, event_id: str) -> int:
        """Append position of ``event_id``; TREE-HEAD error when it is not in the log."""
        try:
            return self._index[event_id]
        except KeyError:
            raise TreeError(
                "TREE-HEAD", f"event {event_id!r} is not in the log", event_ids=[event_id]
            ) from None

    def get(self, event_id: str) -> NodeT:
        return self.events[self.position(event_id)]

    def parent_position(self, position: int) -> int:
        """Resolved parent of the event at ``position``: a position, NO_PARENT or MISSING_PARENT."""
        return self._parent[position]

    def effective_parent_id(self, event_id: str) -> str | None:
        """The parent id after TREE-PARENT resolution; None for a root."""
        position = self.position(event_id)
        parent = self._parent[position]
        if parent == MISSING_PARENT:
            raise self._missing(position)
        return None if parent == NO_PARENT else self.events[parent].id

    # -- paths ----------------------------------------------------------------------------

    def path_positions(self, head_id: str, limit: int | None = None) -> list[int]:
        """Positions on the path root..head (TREE-PATH); with ``limit`` only its last ``limit``.

        Costs O(len(result)). Raises TREE-CYCLE on meeting an id twice and TREE-MISSING on a
        parent that is not in the log (both naming the ids).
        """
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        chain: list[int] = []
        seen: set[int] = set()
        parents = self._parent
        current = self.position(head_id)
        while current >= 0 and (limit is None or len(chain) < limit):
            if current in seen:
                cycle_id = self.events[current].id
                raise TreeError(
                    "TREE-CYCLE",
                    f"walking up from {head_id!r} meets {cycle_id!r} twice",
                    event_ids=[cycle_id],
                )
            seen.add(current)
            chain.append(current)
            parent = parents[current]
            if parent == MISSING_PARENT and (limit is None or len(chain) < limit):
                raise self._missing(current)
            current = parent
        chain.reverse()
        return chain

    def path_to_root(self, head_id: str, limit: int | None = None) -> list[NodeT]:
        """The active path for ``head_id``, root first (TREE-PATH); see ``path_positions``."""
        events = self.events
        return [events[position] for position in self.path_positions(head_id, limit)]

    # -- shape ----------------------------------------------------------------------------

    def children_positions(self, position: int) -> list[int]:
        return self._child_lists()[position]

    def children(self, event_id: str) -> list[NodeT]:
        events = self.events
        return [events[child] for child in self._child_lists()[self.position(event_id)]]

    def roots(self) -> list[NodeT]:
        return [self.events[p] for p, parent in enumerate(self._parent) if parent == NO_PARENT]

    def heads(self) -> list[str]:
        """Leaves that can be heads: events, other than state changes, whose only children (if
        any) are state changes (state-change events are side leaves, never heads)."""
        events = self.events
        has_real_child = [False] * len(events)
        for position, parent in enumerate(self._parent):
            if parent >= 0 and events[position].kind != "state_change":
                has_real_child[parent] = True
        return [
            event.id
            for position, event in enumerate(events)
            if not has_real_child[position]
            and event.kind != "state_change"
            and self._index[event.id] == position
        ]

    def branch_points(self) -> list[str]:
        """Events with two or more children that are not state changes."""
        events = self.events
        counts = [0] * len(events)
        for position, parent in enumerate(self._parent):
            if parent >= 0 and events[position].kind != "state_change":
                counts[parent] += 1
        return [events[p].id for p, count in enumerate(counts) if count >= 2]

    def default_head(self) -> str | None:
        """The last appended event that is not a state change (None for an empty log)."""
        for event in reversed(self.events):
            if event.kind != "state_change":
                return event.id
        return None

    def lags(self, head_id: str) -> bool:
        """TREE-HEAD: whether ``head_id`` has later events continuing its own branch."""
        events = self.events
        return any(
            events[c].kind != "state_change"
            for c in self.children_positions(self.position(head_id))
        )

    # -- internals ------------------------------------------------------------------------

    def _child_lists(self) -> list[list[int]]:
        if self._children is None:
            children: list[list[int]] = [[] for _ in self.events]
            for position, parent in enumerate(self._parent):
                if parent >= 0:
                    children[parent].append(position)
            self._children = children
        return self._children

    def _missing(self, position: int) -> TreeError:
        event = self.events[position]
        return TreeError(
            "TREE-MISSING",
            f"event {event.id!r} names parent {event.parent_id!r}, which is not in the log",
            event_ids=[event.id, str(event.parent_id)],
        )
