"""The branch summary read from a store's line rows, fetching only the events it names."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from treadle.events.branches import NO_BASE, BranchSummary, Line, Node, summarize


def summary_from_index(
    lines: Sequence[Line],
    nodes: Callable[[list[int]], Sequence[Node]],
    children: Callable[[list[int]], Sequence[tuple[int, Node]]],
    head: str | None,
) -> BranchSummary:
    """The branch summary from a store's line rows, reading only the events it names: each
    line's first event, head and base, the lines of the bases, and the bases' children
    (``nodes(seqs)`` and ``children(bases)`` are three point-lookup queries in all)."""
    bases = sorted({line.base for line in lines if line.base != NO_BASE})
    wanted = {seq for line in lines for seq in (line.line, line.head)} | set(bases)
    found = {node.seq: node for node in nodes(sorted(wanted))}
    below: dict[int, list[int]] = {}
    for parent, child in children(bases):
        found[child.seq] = child
        below.setdefault(parent, []).append(child.seq)
    missing = sorted({found[base].line for base in bases} - found.keys())
    found.update((node.seq, node) for node in nodes(missing))
    return summarize(lines, found, below, head)
