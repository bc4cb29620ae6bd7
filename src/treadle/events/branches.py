"""The branch summary of a log: its lines of descent (one per head), where each hangs from, and
the branch points, computed from a store's index rows in O(branches), or from shapes.

A *line* is a chain of events that are not state changes, each the first such child of the one
before: an event continues its parent's line when the parent is that line's last event (a head,
TREE-HEAD), and starts a new line hanging from its parent otherwise. So lines and heads pair one
to one, and a branch point (two or more children that are not state changes, see
``EventTree.branch_points``) is the base of a line that is not a state change, or the base of
two lines. State changes are side leaves: they belong to their parent's line and start none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

STATE_CHANGE = "state_change"
NO_BASE = -1
"""The base of a line that starts at a root."""


class Shape(Protocol):
    """An event's place in the tree (``store.base.EventShape`` is one)."""

    @property
    def seq(self) -> int: ...
    @property
    def id(self) -> str: ...
    @property
    def parent_id(self) -> str: ...
    @property
    def kind(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Line:
    """One row of a store's line index: seqs of its first event, its base and its head."""

    line: int
    base: int
    """Seq of the event the line hangs from; NO_BASE for a root."""
    head: int


@dataclass(frozen=True, slots=True)
class Node:
    """What the summary tells of one event (a line's first event, head or base)."""

    seq: int
    id: str
    kind: str
    depth: int
    """Events above it on its path (a root: 0)."""
    line: int
    """The line it is on (a state change: its parent's)."""
    time_us: int = 0


@dataclass(frozen=True, slots=True)
class Branch:
    """A line with its head: ``length`` events on the path root..head, ``own`` of them on the
    line itself; ``base``/``parent`` name the event and the line (its first id) it hangs from."""

    id: str
    head: str
    head_seq: int
    length: int
    own: int
    base: str | None
    parent: str | None
    time_us: int
    active: bool


@dataclass(frozen=True, slots=True)
class BranchPoint:
    id: str
    seq: int
    depth: int
    line: str
    """First id of the line the point is on."""
    children: list[str]
    """Its children that are not state changes, in seq order."""


@dataclass(frozen=True, slots=True)
class BranchSummary:
    head: str | None
    """The stored head (it may be an inner event, after a switch to one)."""
    heads: list[str]
    """Head ids in seq order (as ``EventTree.heads``)."""
    branch_points: list[str]
    branches: list[Branch] = field(default_factory=list)
    points: list[BranchPoint] = field(default_factory=list)


def next_line(
    seq: int, kind: str, parent: int, parent_line: int | None, parent_heads: int | None
) -> int:
    """The line of a new event at ``seq`` (the store's index applies the same rule in SQL).

    ``parent``: the resolved parent's seq (NO_BASE for a root); ``parent_line``: its line;
    ``parent_heads``: the line whose head the parent is, None when it heads none.
    """
    if parent == NO_BASE:
        return seq
    if kind == STATE_CHANGE:
        return seq if parent_line is None else parent_line
    return seq if parent_heads is None else parent_heads


def index_shapes(shapes: Sequence[Shape]) -> tuple[list[Line], list[int], list[int]]:
    """(lines in order of their first seq, line of each seq, depth of each seq): what a
    store's index holds, for a log in seq order (shape i has seq i). Builds a migrated index."""
    position = {shape.id: i for i, shape in enumerate(shapes)}
    lines: dict[int, list[int]] = {}  # line -> [base, head]
    heading: dict[int, int] = {}  # head seq -> its line
    line_of: list[int] = []
    depth: list[int] = []
    for seq, shape in enumerate(shapes):
        parent = NO_BASE if shape.parent_id == "__root__" else position[shape.parent_id]
        line = next_line(
            seq,
            shape.kind,
            parent,
            None if parent == NO_BASE else line_of[parent],
            heading.get(parent),
        )
        line_of.append(line)
        depth.append(0 if parent == NO_BASE else depth[parent] + 1)
        if shape.kind == STATE_CHANGE:
            continue
        if line == seq:
            lines[line] = [parent, seq]
        else:
            del heading[lines[line][1]]
            lines[line][1] = seq
        heading[seq] = line
    return [Line(line, base, head) for line, (base, head) in lines.items()], line_of, depth


def summarize(
    lines: Sequence[Line],
    nodes: Mapping[int, Node],
    children: Mapping[int, Sequence[int]],
    head: str | None,
) -> BranchSummary:
    """The summary from the index: ``nodes`` holds every line's first event, head and base;
    ``children`` the children (not state changes) of every base, in seq order."""
    per_base: dict[int, int] = {}
    for line in lines:
        if line.base != NO_BASE:
            per_base[line.base] = per_base.get(line.base, 0) + 1
    point_seqs = sorted(
        base for base, count in per_base.items() if count >= 2 or nodes[base].kind != STATE_CHANGE
    )
    branches = []
    for line in sorted(lines, key=lambda item: item.head):
        first, last = nodes[line.line], nodes[line.head]
        base = nodes.get(line.base)
        branches.append(
            Branch(
                id=first.id,
                head=last.id,
                head_seq=last.seq,
                length=last.depth + 1,
                own=last.depth - first.depth + 1,
                base=None if base is None else base.id,
                parent=None if base is None else nodes[base.line].id,
                time_us=last.time_us,
                active=last.id == head,
            )
        )
    points = [
        BranchPoint(
            id=nodes[seq].id,
            seq=seq,
            depth=nodes[seq].depth,
            line=nodes[nodes[seq].line].id,
            children=[nodes[child].id for child in children.get(seq, ())],
        )
        for seq in point_seqs
    ]
    return BranchSummary(
        head=head,
        heads=[branch.head for branch in branches],
        branch_points=[point.id for point in points],
        branches=branches,
        points=points,
    )


def summary_of_shapes(
    shapes: Sequence[Shape], head: str | None, times: Sequence[int] | None = None
) -> BranchSummary:
    """The summary of a whole log (a full walk: for tests, migrations and small logs)."""
    lines, line_of, depth = index_shapes(shapes)
    position = {shape.id: i for i, shape in enumerate(shapes)}

    def node(seq: int) -> Node:
        shape = shapes[seq]
        time = 0 if times is None else times[seq]
        return Node(seq, shape.id, shape.kind, depth[seq], line_of[seq], time)

    nodes: dict[int, Node] = {}
    children: dict[int, list[int]] = {}
    bases = {line.base for line in lines if line.base != NO_BASE}
    for line in lines:
        for seq in (line.line, line.head, line.base):
            if seq != NO_BASE:
                nodes[seq] = node(seq)
    for seq in bases:
        nodes[line_of[seq]] = node(line_of[seq])
    for seq, shape in enumerate(shapes):
        parent = position.get(shape.parent_id)
        if parent in bases and shape.kind != STATE_CHANGE:
            children.setdefault(parent, []).append(seq)
            nodes[seq] = node(seq)
    return summarize(lines, nodes, children, head)


__all__ = [
    "NO_BASE",
    "Branch",
    "BranchPoint",
    "BranchSummary",
    "Line",
    "Node",
    "index_shapes",
    "next_line",
    "summarize",
    "summary_of_shapes",
]
