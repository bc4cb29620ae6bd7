"""`treadle audit`: checks a log against the audit-checkable contracts, every branch.

One iterative walk of the event forest, linear in the log; a broken tree is reported, never raised.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from treadle.events import audit_checkpoint as kept
from treadle.events.audit_checkpoint import (
    BatchTable,
    FactsSource,
    LazyFacts,
    LazyIndex,
    TailList,
)
from treadle.events.audit_facts import AuditFacts, facts_of
from treadle.events.model import (
    EVENT_KINDS,
    MODEL_VISIBLE_KINDS,
    RESULT_KINDS,
    ROOT,
    EventBase,
)
from treadle.events.tree import MISSING_PARENT, NO_PARENT, EventTree

NO_EVENT = -1
"""Position meaning "no such event" in the walk's int lists."""

# The walk's per-event int lists are arrays of C ints: 4 bytes an event and no int object
# each (an audit kept for a growing log holds a dozen of them).


def _no_events(count: int) -> array[int]:
    return array("i", [NO_EVENT]) * count


def _positions(values: Iterable[int]) -> array[int]:
    return array("i", values)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken contract: its contract name, the events at fault, a one-line explanation."""

    contract: str
    event_ids: tuple[str, ...]
    message: str

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "contract": self.contract,
            "event_ids": list(self.event_ids),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What ``audit_events`` found. ``notices`` are reported but are not violations (a lagging
    head); ``pending`` are the unanswered actions on the focus head's path (LINK-PENDING)."""

    violations: list[Violation] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    heads: list[str] = field(default_factory=list)
    head: str | None = None
    notices: list[Violation] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.violations

    def contracts(self) -> list[str]:
        """The contract name of every violation, in report order."""
        return [violation.contract for violation in self.violations]

    def to_json_dict(self) -> dict[str, Any]:
        """The ``treadle audit --json`` object (README.md), plus ``head`` and ``notices``."""
        return {
            "violations": [violation.to_json_dict() for violation in self.violations],
            "pending": list(self.pending),
            "counts": dict(self.counts),
            "heads": list(self.heads),
            "head": self.head,
            "notices": [notice.to_json_dict() for notice in self.notices],
        }

    def to_summary_dict(self, violations_limit: int) -> dict[str, Any]:
        """The ``GET /audit`` object: ``to_json_dict`` with only the first ``violations_limit``
        violations (log order), and ``violations_total``, ``violation_counts`` (by contract)
        and ``truncated`` saying what the list leaves out. A log can hold millions of
        violations: the answer stays small, its totals exact."""
        shown = self.violations[: max(violations_limit, 0)]
        return {
            "violations": [violation.to_json_dict() for violation in shown],
            "pending": list(self.pending),
            "counts": dict(self.counts),
            "heads": list(self.heads),
            "head": self.head,
            "notices": [notice.to_json_dict() for notice in self.notices],
            "violations_total": len(self.violations),
            "violation_counts": dict(Counter(self.contracts())),
            "truncated": len(shown) < len(self.violations),
        }


def audit_events(
    events: Sequence[EventBase] | Sequence[AuditFacts], *, head: str | None = None
) -> AuditReport:
    """Check ``events`` (in append order) on every branch and report all violations found.

    ``head`` is the focus of the path checks (TREE-HEAD, pending); it defaults to the tree's
    default head. Never raises on a bad tree: cycles, missing parents and duplicate ids become
    violations, and the rest of the log is still checked. The audit reads only each event's
    ``AuditFacts``: give those (a store's ``audit_facts``) to skip decoding payloads.
    """
    return _audit([facts_of(event) for event in events], head)


def _audit(events: list[AuditFacts], head: str | None) -> AuditReport:
    tree = EventTree(events)
    kinds = [event.kind for event in events]
    findings = _Findings(events)
    findings.duplicate_ids(tree)
    parents = _positions(tree.parent_position(position) for position in range(len(events)))
    forest = _forest_parents(parents, findings)
    _BranchWalk(tree, kinds, forest, findings).walk()
    focus = head if head is not None else tree.default_head()
    pending = _focus_head(tree, parents, focus, findings)
    return AuditReport(
        violations=findings.sorted_violations(),
        pending=pending,
        counts=_counts_by_kind(kinds),
        heads=tree.heads(),
        head=focus,
        notices=findings.notices,
    )


class _Ids(Protocol):
    """What the walk asks of the log besides positions: ``EventTree`` is one."""

    @property
    def events(self) -> Sequence[AuditFacts]: ...
    def __contains__(self, event_id: object) -> bool: ...
    def get(self, event_id: str) -> AuditFacts: ...
    def position(self, event_id: str) -> int: ...


class IncrementalAudit:
    """The audit of a log that grows by appends: ``report`` equals ``audit_events`` of every
    event given so far (tests/events/test_audit_incremental.py checks it on random logs).

    Events that continue the path the walk ended on (a store's appends on the latest branch:
    a new id, its parent the last event walked, or a new root) are walked from the saved
    state, O(new events); any other append (a fork from an older event, a duplicate id, a
    missing parent, a log with such faults already) audits the whole log again.
    """

    def __init__(self, events: Sequence[EventBase] | Sequence[AuditFacts] = ()) -> None:
        self.events: list[AuditFacts] | LazyFacts = []
        """What the audit read of each event: its ``AuditFacts``, never the event itself (a
        restored audit reads those before its checkpoint from its source when it needs one)."""
        self._index: dict[str, int] | LazyIndex = {}
        self.unkept = 0
        """Events walked since this audit was restored from a checkpoint, or its checkpoint
        was kept (``treadle.store.audit_summary`` sets it back to 0): an audit again in full
        walks them all."""
        self._rebuild([facts_of(event) for event in events])

    def __len__(self) -> int:
        return len(self.events)

    # -- the _Ids protocol, for the walk ------------------------------------------------------

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._index

    def get(self, event_id: str) -> AuditFacts:
        return self.events[self._index[event_id]]

    def position(self, event_id: str) -> int:
        return self._index[event_id]

    # -- growing --------------------------------------------------------------------------

    def extend(self, events: Sequence[EventBase] | Sequence[AuditFacts]) -> None:
        """Take ``events`` appended after the ones given so far (in append order)."""
        if isinstance(self._index, LazyIndex):  # one look-up of the ids the appends name
            facts = [facts_of(event) for event in events]
            self._index.prefetch(
                [f.id for f in facts] + [f.parent_id for f in facts if f.parent_id is not None]
            )
        for number in range(len(events)):
            event = facts_of(events[number])
            parent = self._continues(event)
            if parent is None:
                self._rebuild([*self.events, *(facts_of(e) for e in events[number:])])
                return
            self._walk_one(event, parent)

    def _continues(self, event: AuditFacts) -> int | None:
        """The parent position of ``event`` when it extends the walk's last path, else None."""
        if not self._clean or event.id in self._index:
            return None
        parent_id = event.parent_id
        if parent_id is None:  # legacy: the event appended just before
            parent = len(self.events) - 1
        elif parent_id == ROOT:
            return NO_PARENT
        else:
            parent = self._index.get(parent_id, MISSING_PARENT)
        return parent if parent >= 0 and parent == self._walk.last_entered else None

    def _walk_one(self, event: AuditFacts, parent: int) -> None:
        walk = self._walk
        self.unkept += 1
        self.events.append(event)
        position = walk.grow(parent, event.kind)
        self._index[event.id] = position
        if event.id in walk.unknown_links:
            self._now_in_the_log(event.id)
        self._parents.append(parent)
        self._first_continuation.append(NO_EVENT)
        self._counts[event.kind] += 1
        if parent == NO_PARENT:  # a new tree: its path starts empty
            walk._forget_path()
            self._pending = _PendingOnPath()
        walk.enter(position)
        walk.last_entered = position
        self._pending.add(event)
        if event.kind != "state_change":
            self._default_head = position
            self._heads[position] = None
            if parent >= 0:
                self._heads.pop(parent, None)
                if self._first_continuation[parent] < 0:
                    self._first_continuation[parent] = position

    def _now_in_the_log(self, event_id: str) -> None:
        """An id that LINK-ID findings said was not in the log is now: say what it names, as
        a full audit of the log does."""
        walk, findings = self._walk, self._findings
        why = walk._why_not_linked(event_id)
        for index in walk.unknown_links.pop(event_id):
            position, violation = findings.found[index]
            message = f"{findings.describe(position)}: {why}"
            findings.found[index] = (
                position,
                Violation(violation.contract, violation.event_ids, message),
            )

    def _rebuild(self, events: list[AuditFacts]) -> None:
        """Audit ``events`` in full (as ``audit_events``) and keep what extending needs."""
        self.events = events
        self.unkept += len(events)
        tree = EventTree(events)
        self._findings = findings = _Findings(events)
        findings.duplicate_ids(tree)
        parents = _positions(tree.parent_position(position) for position in range(len(events)))
        forest = _forest_parents(parents, findings)
        self._clean = not tree.duplicate_positions and forest == parents
        index: dict[str, int] = {}
        for position, event in enumerate(events):
            index.setdefault(event.id, position)
        self._index = index
        self._parents = parents
        self._walk = _BranchWalk(self, [event.kind for event in events], forest, findings)
        self._walk.walk()
        self._counts = Counter(self._walk.kinds)
        self._heads = {index[head]: None for head in tree.heads()}
        default = tree.default_head()
        self._default_head = NO_EVENT if default is None else index[default]
        self._first_continuation: array[int] = _no_events(len(events))
        for position in range(len(events) - 1, -1, -1):
            parent = parents[position]
            if parent >= 0 and events[position].kind != "state_change":
                self._first_continuation[parent] = position
        self._pending = _PendingOnPath()
        if self._clean and self._walk.last_entered >= 0:
            for position in _walkable_path(parents, self._walk.last_entered):
                self._pending.add(events[position])

    # -- the report -----------------------------------------------------------------------

    def report(self, head: str | None = None) -> AuditReport:
        """As ``audit_events(events, head=head)``: O(violations + heads) on the latest path."""
        if not self._clean:  # faults in the tree: the full focus checks (rare: stores refuse)
            return _audit(list(self.events), head)
        events = self.events
        focus = head
        if focus is None and self._default_head >= 0:
            focus = events[self._default_head].id
        found = list(self._findings.found)
        notices: list[Violation] = []
        pending: list[str] = []
        if focus is not None and focus not in self._index:
            found.append((NO_EVENT, _missing_head(focus)))
        elif focus is not None:
            position = self._index[focus]
            later = self._first_continuation[position]
            if later >= 0:
                notices.append(_lag_notice(focus, events[later].id))
            pending = self._pending_at(position)
        found.sort(key=lambda item: item[0])
        return AuditReport(
            violations=[violation for _, violation in found],
            pending=pending,
            counts=_counts_of(self._counts),
            heads=[events[position].id for position in self._heads],
            head=focus,
            notices=notices,
        )

    def _pending_at(self, position: int) -> list[str]:
        # State changes answer nothing: below the last one on the latest path, pending is the
        # same as at its end.
        last = self._walk.last_entered
        while last >= 0 and last != position and self.events[last].kind == "state_change":
            last = self._parents[last]
        if last == position:
            return self._pending.ids()
        path = _walkable_path(self._parents, position)
        events = self.events
        if isinstance(events, LazyFacts):
            return _pending_on(events.many(path))
        return _pending_on([events[p] for p in path])

    # -- kept between processes (treadle.events.audit_checkpoint) -------------------------------

    def checkpoint(self) -> bytes | None:
        """This audit's state as bytes that ``restore`` reads back, without the events'
        records; None for a log with faults in its tree (such a log is audited in full)."""
        if not self._clean:
            return None
        walk = self._walk
        pending = self._pending
        header: dict[str, Any] = {
            "count": len(self.events),
            "default_head": self._default_head,
            "last_entered": walk.last_entered,
            "heads": list(self._heads),
            "counts": list(self._counts.items()),
            "found": [
                [position, v.contract, list(v.event_ids), v.message]
                for position, v in self._findings.found
            ],
            "pending": [[i, facts.tool_call_id] for i, facts in pending.open_actions.items()],
            "pending_by_call": list(pending.open_by_call.items()),
            "open_actions": list(walk.open_actions),
            "forgotten": list(walk.forgotten.items()),
            "newly_forgotten": list(walk.newly_forgotten.items()),
            "unknown_links": list(walk.unknown_links.items()),
        }
        arrays = {
            "parents": self._parents,
            "first_continuation": self._first_continuation,
            "last_visible": walk.last_visible,
            "last_condensation": walk.last_condensation,
            "batch_first": walk.batch_first,
            "answered_by": walk.answered_by,
            "closed": walk.closed,
            "call_owner": kept.ints(walk.call_owner.values()),
            "action_at": kept.ints(walk.action_at.values()),
        }
        batches = walk.batch_actions
        table = dict(batches.items()) if isinstance(batches, BatchTable) else batches
        arrays["batch_flat"], arrays["batch_lengths"] = BatchTable.encode(table)
        texts = {"call_owner": list(walk.call_owner), "action_at": list(walk.action_at)}
        return kept.encode(header, arrays, texts)

    @classmethod
    def restore(cls, data: bytes, source: FactsSource) -> IncrementalAudit:
        """The audit ``checkpoint`` wrote, reading the records of the events before it from
        ``source`` only when it needs them. CheckpointError when ``data`` is not one."""
        header, arrays, texts = kept.decode(data)
        try:
            return cls._restored(header, arrays, texts, source)
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise kept.CheckpointError(f"damaged audit checkpoint: {error!r}") from None

    @classmethod
    def _restored(
        cls,
        header: dict[str, Any],
        arrays: dict[str, array[int]],
        texts: dict[str, list[str]],
        source: FactsSource,
    ) -> IncrementalAudit:
        count = int(header["count"])
        audit = cls.__new__(cls)
        audit.events = events = LazyFacts(source, count)
        audit._index = LazyIndex(source, count)
        audit.unkept = 0
        audit._clean = True
        audit._parents = arrays["parents"]
        audit._first_continuation = arrays["first_continuation"]
        if len(audit._parents) != count or len(audit._first_continuation) != count:
            raise ValueError("arrays of another length than the count")
        audit._findings = findings = _Findings(events)
        findings.found = [
            (int(position), Violation(str(contract), tuple(ids), str(message)))
            for position, contract, ids, message in header["found"]
        ]
        audit._counts = Counter({str(kind): int(n) for kind, n in header["counts"]})
        audit._heads = {int(position): None for position in header["heads"]}
        audit._default_head = int(header["default_head"])
        audit._pending = pending = _PendingOnPath()
        for action_id, call in header["pending"]:
            pending.open_actions[action_id] = AuditFacts(action_id, None, "action", "", call)
        pending.open_by_call = dict(header["pending_by_call"])

        def response(position: int) -> str | None:
            facts = events[position]
            return facts.llm_response_id if facts.kind == "action" else None

        walk = _BranchWalk.__new__(_BranchWalk)
        walk.tree = audit
        walk.events = events
        walk.kinds = TailList(count, lambda position: events[position].kind)
        walk.forest = audit._parents[:]  # a clean log's forest is its parents
        walk.findings = findings
        for name in ("last_visible", "last_condensation", "batch_first", "answered_by", "closed"):
            values = arrays[name]
            if len(values) != count:
                raise ValueError(f"{name}: another length than the count")
            setattr(walk, name, values)
        walk.response_of = TailList(count, response)
        # Undo records: read only when the walk leaves an event, which a restored walk never
        # does (it only enters new events on its path; any other append audits in full).
        walk.shadowed_call = _no_events(count)
        walk.shadowed_action = _no_events(count)
        walk.reopen = bytearray(count)
        walk.call_owner = dict(zip(texts["call_owner"], arrays["call_owner"], strict=True))
        walk.action_at = dict(zip(texts["action_at"], arrays["action_at"], strict=True))
        walk.open_actions = {int(position): None for position in header["open_actions"]}
        walk.batch_actions = BatchTable(arrays["batch_flat"], arrays["batch_lengths"])
        walk.forgotten = {str(i): int(position) for i, position in header["forgotten"]}
        walk.newly_forgotten = {int(p): list(ids) for p, ids in header["newly_forgotten"]}
        walk.last_entered = int(header["last_entered"])
        walk.unknown_links = {str(i): list(found) for i, found in header["unknown_links"]}
        audit._walk = walk
        return audit


class _PendingOnPath:
    """``links.pending_actions`` of a path fed one event at a time (the same rule, on the
    audit's records; tests/events/test_audit_incremental.py compares them)."""

    def __init__(self) -> None:
        self.open_actions: dict[str, AuditFacts] = {}
        self.open_by_call: dict[str, str] = {}

    def add(self, event: AuditFacts) -> None:
        if event.kind == "action":
            self.open_actions[event.id] = event
            self.open_by_call[event.tool_call_id] = event.id
        elif event.kind in RESULT_KINDS:
            action_id = event.action_id
            if action_id is None or action_id not in self.open_actions:
                action_id = self.open_by_call.get(event.tool_call_id)
            if action_id is not None:
                answered = self.open_actions.pop(action_id, None)
                if (
                    answered is not None
                    and self.open_by_call.get(answered.tool_call_id) == action_id
                ):
                    del self.open_by_call[answered.tool_call_id]

    def ids(self) -> list[str]:
        return list(self.open_actions)


def _missing_head(focus: str) -> Violation:
    return Violation("TREE-HEAD", (focus,), f"head {focus!r} is not an event of the log")


def _lag_notice(focus: str, later: str) -> Violation:
    return Violation(
        "TREE-HEAD",
        (focus, later),
        f"head {focus!r} lags: later events continue its branch (first {later!r}); "
        "the saved head was not moved",
    )


class _Findings:
    """Collects violations with the position of the event at fault, to report in log order."""

    def __init__(self, events: Sequence[AuditFacts]) -> None:
        self.events = events
        self.found: list[tuple[int, Violation]] = []
        self.notices: list[Violation] = []

    def add(self, position: int, contract: str, event_ids: Sequence[str], message: str) -> None:
        self.found.append((position, Violation(contract, tuple(event_ids), message)))

    def sorted_violations(self) -> list[Violation]:
        self.found.sort(key=lambda found: found[0])  # stable: same event keeps finding order
        return [violation for _, violation in self.found]

    def describe(self, position: int) -> str:
        event = self.events[position]
        return f"{event.kind} {event.id!r} (position {position})"

    # -- whole-log checks -----------------------------------------------------------------

    def duplicate_ids(self, tree: EventTree[AuditFacts]) -> None:
        """APPEND-DUP-ID, one violation per repeated id, naming every position it has."""
        repeats: dict[str, list[int]] = {}
        for position in tree.duplicate_positions:
            repeats.setdefault(self.events[position].id, []).append(position)
        for event_id, positions in repeats.items():
            first = tree.position(event_id)  # the tree resolves an id to its first event
            where = ", ".join(str(p) for p in [first, *positions])
            self.add(
                positions[0],
                "APPEND-DUP-ID",
                [event_id],
                f"event id {event_id!r} is used by {len(positions) + 1} events "
                f"(positions {where}); a store refuses the repeat",
            )

    def missing_parent(self, position: int) -> None:
        event = self.events[position]
        self.add(
            position,
            "TREE-MISSING",
            [event.id, str(event.parent_id)],
            f"{self.describe(position)} names parent {event.parent_id!r}, which is not in the "
            "log (a broken trajectory)",
        )

    def parent_after_child(self, position: int, parent: int) -> None:
        self.add(
            position,
            "TREE-PARENT",
            [self.events[position].id, self.events[parent].id],
            f"{self.describe(position)} names parent {self.events[parent].id!r}, appended "
            f"later at position {parent}: no append could produce this log",
        )

    def cycle(self, cycle: Sequence[int]) -> None:
        events = self.events
        chain = " -> ".join(repr(events[position].id) for position in cycle)
        self.add(
            min(cycle),
            "TREE-CYCLE",
            [events[position].id for position in cycle],
            f"parent links form a cycle: {chain} -> {events[cycle[0]].id!r}",
        )


def _forest_parents(parents: array[int], findings: _Findings) -> array[int]:
    """The parents to walk: a missing parent (TREE-MISSING) and one link of every cycle
    (TREE-CYCLE) become roots, so the events below them are still checked."""
    forest = parents[:]
    suspects: list[int] = []  # a parent at or after its child: only these can close a cycle
    for position, parent in enumerate(parents):
        if parent >= position:
            suspects.append(position)
        elif parent == MISSING_PARENT:
            findings.missing_parent(position)
            forest[position] = NO_PARENT
    if not suspects:
        return forest
    on_cycle: set[int] = set()
    for cycle in _find_cycles(parents, suspects):
        findings.cycle(cycle)
        on_cycle.update(cycle)
        # Its earliest event names a later parent: cutting that link is the likeliest repair.
        forest[min(cycle)] = NO_PARENT
    for position in suspects:
        if position not in on_cycle:
            findings.parent_after_child(position, parents[position])
    return forest


def _find_cycles(parents: Sequence[int], starts: Sequence[int]) -> list[list[int]]:
    """Every cycle of the parent function, each once, in walking order.

    Each walk colors the events it climbs through; meeting its own color closes a new cycle,
    meeting an older color or a root ends it. Every event is colored once: linear. Every cycle
    has an event whose parent is at or after it, so walking up from those ``starts`` suffices.
    """
    color = [0] * len(parents)
    cycles: list[list[int]] = []
    for walk, start in enumerate(starts, 1):
        position = start
        while position >= 0 and not color[position]:
            color[position] = walk
            position = parents[position]
        if position >= 0 and color[position] == walk:
            cycle = [position]
            member = parents[position]
            while member != position:
                cycle.append(member)
                member = parents[member]
            cycles.append(cycle)
    return cycles


class _BranchWalk:
    """The depth-first walk over the forest, with the state of the path from a root to the
    event being visited: entering an event updates it, leaving restores it.

    State lives in int lists indexed by position (no object per event: the walk stays fast
    and gives the garbage collector nothing to scan). Facts that depend only on an event's
    path (the last model-visible event, the batch of an action) are kept; the rest is undone.
    """

    def __init__(
        self, tree: _Ids, kinds: list[str], forest: array[int], findings: _Findings
    ) -> None:
        events = tree.events
        count = len(events)
        self.tree = tree
        self.events = events
        self.kinds: list[str] | TailList[str] = kinds
        self.forest = forest
        self.findings = findings
        self.last_visible = _no_events(count)
        """Position of the last model-visible event on the path ending at each event."""
        self.batch_first = _no_events(count)
        """For an action: the first action of its batch (PROJECT-BATCH) on its path."""
        self.response_of: list[str | None] | TailList[str | None] = [None] * count
        """For an action: its llm_response_id, read once."""
        self.answered_by = _no_events(count)
        """For an action on the path: the final result on the path that closed it."""
        self.call_owner: dict[str, int] = {}
        """tool_call_id -> the latest action on the path with that call."""
        self.action_at: dict[str, int] = {}
        """Action id -> its position, for actions on the path."""
        self.open_actions: dict[int, None] = {}
        """Actions on the path without a final result, not yet reported as LINK-ORPHAN. They
        all share one llm_response_id: a later action of another response flushes the rest."""
        # Undo records, by the position of the event that made the change.
        self.shadowed_call = _no_events(count)
        self.shadowed_action = _no_events(count)
        self.closed = _no_events(count)
        self.reopen = bytearray(count)
        self.batch_actions: dict[int, list[int]] | BatchTable = {}
        """First action of a batch on the path -> the batch's actions on the path."""
        self.last_condensation = _no_events(count)
        """A condensation on the path ending at each event with no model-visible event after
        it (CONDENSE-LOOP)."""
        self.forgotten: dict[str, int] = {}
        """Ids the condensations on the path forgot -> the first condensation that did."""
        self.newly_forgotten: dict[int, list[str]] = {}
        """Condensation position -> the ids it was the first on the path to forget (undo)."""
        self.last_entered = NO_EVENT
        """The event the walk visited last: its path is the state the walk ends with."""
        self.unknown_links: dict[str, list[int]] = {}
        """An action id no event of the log has -> the LINK-ID findings (indexes in
        ``findings.found``) of results naming it: their message says "not in the log", which
        an event of that id appended later makes wrong (``IncrementalAudit`` rewrites them)."""

    def walk(self) -> None:
        first_child, next_sibling = _child_links(self.forest)
        for root, parent in enumerate(self.forest):
            if parent < 0:
                self._forget_path()
                self._walk_tree(root, first_child, next_sibling)

    def _walk_tree(self, root: int, first_child: array[int], next_sibling: array[int]) -> None:
        """Depth-first from ``root``, children in append order. An event's changes are undone
        on leaving it only when a later branch still waits (``waiting``): on the last branch
        of a tree, which is the whole of a chain, nothing is left to undo them for."""
        enter = self.enter
        stack = [root]
        waiting = 1  # events in the stack still to enter (the rest are leave markers)
        while stack:
            position = stack.pop()
            if position < 0:  # leaving an action or a result
                self._leave(~position)
                continue
            waiting -= 1
            if enter(position) and waiting:
                stack.append(~position)
            self.last_entered = position
            child = first_child[position]
            while child >= 0:  # latest first, so that the earliest pops first
                stack.append(child)
                waiting += 1
                child = next_sibling[child]

    def enter(self, position: int) -> bool:
        """Visit the event at ``position`` (its parent's path state is the current one);
        whether it changed path state that leaving it must undo (an action or a result)."""
        kind = self.kinds[position]
        if kind == "action":
            self._enter_action(position)
            return True
        if kind in RESULT_KINDS:
            self._enter_result(position)
            return True
        if kind == "condensation":
            self._enter_condensation(position)
            return True
        if kind in MODEL_VISIBLE_KINDS:
            self.last_visible[position] = position
            if kind == "message" and self.events[position].source == "agent":
                self._asked_again(position, None)
        else:  # not model-visible: neither part of a batch nor a break in one
            parent = self.forest[position]
            if parent >= 0:
                self.last_visible[position] = self.last_visible[parent]
                self.last_condensation[position] = self.last_condensation[parent]
        return False

    def grow(self, parent: int, kind: str) -> int:
        """Room for one more event (appended to ``events``) under ``parent``; its position."""
        self.forest.append(parent)
        self.kinds.append(kind)
        for values in (
            self.last_visible,
            self.last_condensation,
            self.batch_first,
            self.answered_by,
            self.shadowed_call,
            self.shadowed_action,
            self.closed,
        ):
            values.append(NO_EVENT)
        self.response_of.append(None)
        self.reopen.append(0)
        return len(self.forest) - 1

    def _leave(self, position: int) -> None:
        kind = self.kinds[position]
        if kind == "action":
            self._leave_action(position)
        elif kind == "condensation":
            self._leave_condensation(position)
        else:
            self._leave_result(position)

    def _forget_path(self) -> None:
        """A new tree starts with an empty path (what its last branch left is never undone)."""
        self.call_owner.clear()
        self.action_at.clear()
        self.open_actions.clear()
        self.batch_actions.clear()
        self.forgotten.clear()

    # -- actions: PROJECT-SHARED-TEXT, PROJECT-DUP-CALL, LINK-UNIQUE, LINK-ORPHAN ------------

    def _enter_action(self, position: int) -> None:
        action = self.events[position]
        parent = self.forest[position]
        before = self.last_visible[parent] if parent >= 0 else NO_EVENT
        self.last_visible[position] = position
        response = self.response_of[position] = action.llm_response_id
        if before >= 0 and self.response_of[before] == response:  # None unless an action
            first = self.batch_first[before]
            if action.has_shared_text:
                self._shared_text(position, first)
        else:
            first = position
        self.batch_first[position] = first
        self.batch_actions.setdefault(first, []).append(position)
        call_owner = self.call_owner
        call = action.tool_call_id
        earlier = self.shadowed_call[position] = call_owner.get(call, NO_EVENT)
        if earlier >= 0:
            self._repeated_call(position, earlier, same_batch=self.batch_first[earlier] == first)
        call_owner[call] = position
        action_at = self.action_at
        self.shadowed_action[position] = action_at.get(action.id, NO_EVENT)
        action_at[action.id] = position
        if self.open_actions:
            self._asked_again(position, response)
        self.open_actions[position] = None

    def _leave_action(self, position: int) -> None:
        action = self.events[position]
        _restore(self.call_owner, action.tool_call_id, self.shadowed_call[position])
        _restore(self.action_at, action.id, self.shadowed_action[position])
        self.open_actions.pop(position, None)
        batch = self.batch_actions.get(self.batch_first[position], None)
        if batch:  # entered last on the path, so it is the batch's last action
            batch.pop()
            if not batch:
                del self.batch_actions[self.batch_first[position]]

    def _asked_again(self, position: int, response: str | None) -> None:
        """The model was asked again (a new response's action, or an agent message): every
        action still open on the path, of another response, is a LINK-ORPHAN."""
        open_actions = self.open_actions
        if not open_actions:
            return
        if response is not None and self.response_of[next(iter(open_actions))] == response:
            return  # all open actions share one response: this is the same model response
        # Reported once: an orphan stays out of open_actions on every later branch too.
        for orphan in sorted(open_actions):
            self._orphan(orphan, position)
        open_actions.clear()

    def _shared_text(self, position: int, first: int) -> None:
        events = self.events
        self.findings.add(
            position,
            "PROJECT-SHARED-TEXT",
            [events[position].id, events[first].id],
            f"{self.findings.describe(position)} carries thought/reasoning but is not the first "
            f"action of its batch (that is {events[first].id!r}): the text would be sent twice",
        )

    def _repeated_call(self, position: int, earlier: int, *, same_batch: bool) -> None:
        events = self.events
        call = events[position].tool_call_id
        ids = [events[earlier].id, events[position].id]
        if same_batch:
            contract = "PROJECT-DUP-CALL"
            where = "in one batch"
        else:
            contract = "LINK-UNIQUE"
            where = "on one path, in different batches"
        self.findings.add(
            position,
            contract,
            ids,
            f"actions {ids[0]!r} and {ids[1]!r} both have tool_call_id {call!r} {where}",
        )

    def _orphan(self, action: int, response: int) -> None:
        events = self.events
        self.findings.add(
            action,
            "LINK-ORPHAN",
            [events[action].id, events[response].id],
            f"{self.findings.describe(action)} has no final result when the model is asked "
            f"again ({self.findings.describe(response)})",
        )

    # -- condensations: CONDENSE-LOOP, CONDENSE-PENDING, CONDENSE-SPLIT ----------------------

    def _enter_condensation(self, position: int) -> None:
        """Check what the condensation at ``position`` forgets against its path. A pair or a
        batch may be forgotten over several condensations: what an earlier one on the path
        forgot counts as forgotten. Ids that are no event on the path (a summary's derived id,
        an event of another branch) forget nothing there and are not checked."""
        condensation = self.events[position]
        parent = self.forest[position]
        if parent >= 0:
            self.last_visible[position] = self.last_visible[parent]
            earlier = self.last_condensation[parent]
            if earlier >= 0:
                self._condense_loop(position, earlier)
        self.last_condensation[position] = position
        forgotten = self.forgotten
        new: list[str] = []
        for event_id in condensation.forgotten:
            if event_id not in forgotten:
                forgotten[event_id] = position
                new.append(event_id)
        self.newly_forgotten[position] = new
        split_batches: set[int] = set()
        for event_id in dict.fromkeys(condensation.forgotten):
            action = self.action_at.get(event_id, NO_EVENT)
            if action >= 0:
                self._check_forgotten_action(position, action, split_batches)
            elif event_id in self.tree and self.tree.get(event_id).kind in RESULT_KINDS:
                result = self.tree.position(event_id)
                answered = self.closed[result]
                on_path = answered >= 0 and self.answered_by[answered] == result
                if on_path and self.events[answered].id not in forgotten:
                    self._condense_split(
                        position,
                        [event_id, self.events[answered].id],
                        f"it forgets the result {event_id!r} but not its call "
                        f"{self.events[answered].id!r}",
                    )

    def _check_forgotten_action(self, position: int, action: int, split_batches: set[int]) -> None:
        events, forgotten = self.events, self.forgotten
        action_id = events[action].id
        result = self.answered_by[action]
        if result < 0:
            self.findings.add(
                position,
                "CONDENSE-PENDING",
                [events[position].id, action_id],
                f"condensation {events[position].id!r} forgets the call {action_id!r}, which "
                "has no final result yet",
            )
        elif events[result].id not in forgotten:
            self._condense_split(
                position,
                [action_id, events[result].id],
                f"it forgets the call {action_id!r} but not its result {events[result].id!r}",
            )
        first = self.batch_first[action]
        if first in split_batches:
            return
        kept = [p for p in self.batch_actions.get(first, ()) if events[p].id not in forgotten]
        if kept:
            split_batches.add(first)
            self._condense_split(
                position,
                [action_id, *(events[p].id for p in kept)],
                f"it forgets part of the batch of response "
                f"{events[action].llm_response_id!r} (keeps "
                f"{', '.join(repr(events[p].id) for p in kept)})",
            )

    def _condense_split(self, position: int, ids: Sequence[str], why: str) -> None:
        condensation = self.events[position].id
        self.findings.add(
            position,
            "CONDENSE-SPLIT",
            [condensation, *ids],
            f"condensation {condensation!r}: {why}",
        )

    def _condense_loop(self, position: int, earlier: int) -> None:
        events = self.events
        self.findings.add(
            position,
            "CONDENSE-LOOP",
            [events[earlier].id, events[position].id],
            f"condensation {events[position].id!r} follows condensation "
            f"{events[earlier].id!r} with no model-visible event between them",
        )

    def _leave_condensation(self, position: int) -> None:
        for event_id in self.newly_forgotten.pop(position, ()):
            del self.forgotten[event_id]

    # -- results: LINK-ID, LINK-ONCE --------------------------------------------------------

    def _enter_result(self, position: int) -> None:
        self.last_visible[position] = position
        action = self._linked_action(position)
        if action < 0:  # a broken link answers nothing: it was reported as LINK-ID
            return
        earlier = self.answered_by[action]
        if earlier >= 0:
            self._answered_twice(position, action, earlier)
            return
        self.answered_by[action] = position
        self.closed[position] = action
        if action in self.open_actions:
            del self.open_actions[action]
            self.reopen[position] = 1

    def _leave_result(self, position: int) -> None:
        action = self.closed[position]
        if action < 0:
            return
        self.answered_by[action] = NO_EVENT
        if self.reopen[position]:  # while its result was on the path it could not be orphaned
            self.open_actions[action] = None

    def _linked_action(self, position: int) -> int:
        """The action on the path that the result at ``position`` answers (LINK-ID), or NO_EVENT
        after reporting why it answers none."""
        result = self.events[position]
        call = result.tool_call_id
        action_id = result.action_id
        if action_id is None:  # an agent error may answer by its call alone
            action = self.call_owner.get(call, NO_EVENT)
            if action < 0:
                why = f"answers tool_call_id {call!r}, but no action on its path has that call"
                self._link_broken(position, [result.id], why)
            return action
        action = self.action_at.get(action_id, NO_EVENT)
        if action < 0:
            self._link_broken(position, [result.id, action_id], self._why_not_linked(action_id))
            if action_id not in self.tree:  # its message changes if that id comes later
                self.unknown_links.setdefault(action_id, []).append(len(self.findings.found) - 1)
            return NO_EVENT
        linked = self.events[action]
        if call != linked.tool_call_id or (
            result.kind != "agent_error" and result.tool_name != linked.tool_name
        ):
            why = "; ".join(self._mismatches(result, linked))
            self._link_broken(position, [result.id, action_id], why)
            return NO_EVENT
        return action

    def _mismatches(self, result: AuditFacts, action: AuditFacts) -> list[str]:
        # An agent error's tool name may be one that does not exist: only its call is checked.
        fields = ["tool_call_id"] if result.kind == "agent_error" else ["tool_call_id", "tool_name"]
        return [
            f"its {name} is {getattr(result, name)!r} but action {action.id!r} has "
            f"{getattr(action, name)!r}"
            for name in fields
            if getattr(result, name) != getattr(action, name)
        ]

    def _why_not_linked(self, action_id: str) -> str:
        if action_id not in self.tree:
            return f"its action_id {action_id!r} is not in the log"
        kind = self.tree.get(action_id).kind
        if kind != "action":
            return f"its action_id {action_id!r} names a {kind}, not an action"
        return f"its action {action_id!r} is not on its path (another branch, or later)"

    def _link_broken(self, position: int, ids: Sequence[str], why: str) -> None:
        self.findings.add(position, "LINK-ID", ids, f"{self.findings.describe(position)}: {why}")

    def _answered_twice(self, position: int, action: int, earlier: int) -> None:
        events = self.events
        call = events[action].tool_call_id
        self.findings.add(
            position,
            "LINK-ONCE",
            [events[action].id, events[earlier].id, events[position].id],
            f"action {events[action].id!r} (call {call!r}) already has the final result "
            f"{events[earlier].id!r} on this path; {self.findings.describe(position)} is a "
            "second one",
        )


def _child_links(forest: Sequence[int]) -> tuple[array[int], array[int]]:
    """Children as linked lists (latest child first): two int lists, not a list per event."""
    first_child = _no_events(len(forest))
    next_sibling = _no_events(len(forest))
    for position, parent in enumerate(forest):
        if parent >= 0:
            next_sibling[position] = first_child[parent]
            first_child[parent] = position
    return first_child, next_sibling


def _restore(owners: dict[str, int], key: str, earlier: int) -> None:
    if earlier >= 0:
        owners[key] = earlier
    else:
        owners.pop(key, None)


def _focus_head(
    tree: EventTree[AuditFacts], parents: Sequence[int], focus: str | None, findings: _Findings
) -> list[str]:
    """TREE-HEAD for the focus head, and the ids pending on its path (LINK-PENDING)."""
    if focus is None:
        return []
    if focus not in tree:
        findings.found.append((NO_EVENT, _missing_head(focus)))
        return []
    position = tree.position(focus)
    path = _walkable_path(parents, position)
    head_on_cycle = parents[path[0]] == position  # its children then include the cycle itself
    # tree.lags indexes the children of the whole log: ask only when the head has a child.
    if not head_on_cycle and position in parents and tree.lags(focus):
        later = next(c for c in tree.children(focus) if c.kind != "state_change")
        findings.notices.append(_lag_notice(focus, later.id))
    return _pending_on([tree.events[p] for p in path])


def _pending_on(path: Sequence[AuditFacts]) -> list[str]:
    pending = _PendingOnPath()
    for event in path:
        pending.add(event)
    return pending.ids()


def _walkable_path(parents: Sequence[int], head: int) -> list[int]:
    """Positions root..head as far as the parent links can be followed: up to a missing parent,
    or once around a cycle (both already reported)."""
    chain: list[int] = []
    seen = bytearray(len(parents))
    position = head
    while position >= 0 and not seen[position]:
        seen[position] = 1
        chain.append(position)
        position = parents[position]
    chain.reverse()
    return chain


def _counts_by_kind(kinds: Sequence[str]) -> dict[str, int]:
    return _counts_of(Counter(kinds))


def _counts_of(counted: Counter[str]) -> dict[str, int]:
    known = {kind: counted[kind] for kind in EVENT_KINDS if counted[kind]}
    return known | {kind: n for kind, n in counted.items() if kind not in known}
