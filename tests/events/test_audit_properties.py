"""Property tests of the audit: random branching conversations, random completion orders.

Clean logs audit clean, faults are named, and any tangle agrees with a naive per-path scan.
"""

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from treadle.events.audit import audit_events
from treadle.events.model import (
    MODEL_VISIBLE_KINDS,
    RESULT_KINDS,
    ROOT,
    ActionEvent,
    AgentErrorEvent,
    EventBase,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
    UserRejectionEvent,
)
from treadle.events.tree import EventTree


@dataclass
class Turn:
    """One model response: its actions (path order) and the result answering each, if any."""

    actions: list[str]
    result_of: dict[str, str] = field(default_factory=dict)


@dataclass
class Conversation:
    events: list[EventBase]
    pending_at: dict[str, list[str]]
    """Tip of every turn -> the actions pending there, in path order."""
    turns: list[Turn]

    def position(self, event_id: str) -> int:
        return next(p for p, event in enumerate(self.events) if event.id == event_id)

    def replace(self, event_id: str, **changes) -> None:
        position = self.position(event_id)
        self.events[position] = self.events[position].model_copy(update=changes)

    def path_ids(self, head: str) -> list[str]:
        return [event.id for event in EventTree(self.events).path_to_root(head)]


def result_event(kind: str, result_id: str, parent: str | None, action: ActionEvent) -> EventBase:
    link = {"id": result_id, "parent_id": parent, "tool_call_id": action.tool_call_id}
    if kind == "observation":
        return ObservationEvent(**link, action_id=action.id, tool_name=action.tool_name)
    if kind == "user_rejection":
        return UserRejectionEvent(**link, action_id=action.id, tool_name=action.tool_name)
    return AgentErrorEvent(**link, tool_name="no_such_tool", error="bad arguments")


@st.composite
def conversations(draw) -> Conversation:
    """A tree of turns: each starts at the root or at the tip of a fully answered turn (so a
    fork is an older attempt); its results arrive in any order, some never (then it ends)."""
    events: list[EventBase] = []

    def parent_of(parent_id: str) -> str | None:
        # The legacy absent parent means the event appended just before: use it sometimes.
        legacy = events[-1].id == parent_id and draw(st.booleans())
        return None if legacy else parent_id

    def add(event: EventBase) -> str:
        events.append(event)
        return event.id

    starts = [add(MessageEvent(id="u0", source="user", text="task", parent_id=ROOT))]
    pending_at: dict[str, list[str]] = {"u0": []}
    turns: list[Turn] = []
    for number in range(draw(st.integers(1, 6))):
        tip = draw(st.sampled_from(starts))
        if draw(st.booleans()):
            tip = add(MessageEvent(id=f"m{number}", source="user", parent_id=parent_of(tip)))
        turn = Turn(actions=[])
        for index in range(draw(st.integers(1, 3))):
            action = ActionEvent(
                id=f"t{number}a{index}",
                parent_id=parent_of(tip),
                llm_response_id=f"r{number}",
                tool_call_id=f"call{number}.{index}",
                tool_name="terminal",
                raw_arguments="{}",
                arguments={},
                thought="shared text" if index == 0 else "",
            )
            tip = add(action)
            turn.actions.append(action.id)
        order = draw(st.permutations(turn.actions))
        answered = order[: draw(st.integers(0, len(order)))]
        for action_id in answered:
            if draw(st.booleans()):  # not model-visible: changes nothing
                tip = add(StateChangeEvent(id=f"s-{action_id}", parent_id=tip, key="k"))
            kind = draw(st.sampled_from(["observation", "agent_error", "user_rejection"]))
            action = next(e for e in events if e.id == action_id)
            tip = add(result_event(kind, f"res-{action_id}", parent_of(tip), action))  # type: ignore[arg-type]
            turn.result_of[action_id] = tip
        if answered and draw(st.booleans()):
            tip = add(PauseEvent(id=f"p{number}", parent_id=tip))
        unanswered = [a for a in turn.actions if a not in turn.result_of]
        if not unanswered and draw(st.booleans()):
            tip = add(MessageEvent(id=f"a{number}", source="agent", parent_id=tip))
        pending_at[tip] = unanswered
        turns.append(turn)
        if not unanswered:
            starts.append(tip)
    return Conversation(events, pending_at, turns)


def named(report, contract: str) -> list[tuple[str, ...]]:
    return [v.event_ids for v in report.violations if v.contract == contract]


@given(conversations())
def test_clean_conversation_audits_clean_with_pending_exactly_the_unanswered(conversation):
    for tip, unanswered in conversation.pending_at.items():
        report = audit_events(conversation.events, head=tip)
        assert report.clean, report.violations
        assert report.pending == unanswered
        assert report.head == tip
        assert sum(report.counts.values()) == len(conversation.events)


# -- injected faults ---------------------------------------------------------------------


def inject_duplicate_id(conversation, data):
    copied = data.draw(st.sampled_from(conversation.events))
    last = conversation.events[-1].id
    conversation.events.append(copied.model_copy(update={"parent_id": last}))
    return "APPEND-DUP-ID", (copied.id,)


def inject_missing_parent(conversation, data):
    victim = data.draw(st.sampled_from(conversation.events))
    conversation.replace(victim.id, parent_id="ghost")
    return "TREE-MISSING", (victim.id, "ghost")


def inject_parent_after_child(conversation, data):
    victim = data.draw(st.sampled_from(conversation.events))
    conversation.events.append(MessageEvent(id="late", source="user", parent_id=ROOT))
    conversation.replace(victim.id, parent_id="late")
    return "TREE-PARENT", (victim.id, "late")


def inject_cycle(conversation, data):
    path = conversation.path_ids(data.draw(st.sampled_from(list(conversation.pending_at))))
    low = data.draw(st.integers(0, len(path) - 1))
    high = data.draw(st.integers(low, len(path) - 1))
    conversation.replace(path[low], parent_id=path[high])
    return "TREE-CYCLE", frozenset(path[low : high + 1])


def inject_dup_call_in_batch(conversation, data):
    batches = [turn for turn in conversation.turns if len(turn.actions) >= 2]
    if not batches:
        return None
    turn = data.draw(st.sampled_from(batches))
    first, second = turn.actions[0], turn.actions[1]
    _set_call(conversation, turn, second, f"call-of-{first}")
    _set_call(conversation, turn, first, f"call-of-{first}")
    return "PROJECT-DUP-CALL", (first, second)


def inject_dup_call_across_responses(conversation, data):
    tip = data.draw(st.sampled_from(list(conversation.pending_at)))
    on_path = set(conversation.path_ids(tip))
    turns = [turn for turn in conversation.turns if turn.actions[0] in on_path]
    if len(turns) < 2:
        return None
    earlier, later = turns[0], turns[-1]
    _set_call(conversation, earlier, earlier.actions[0], "shared-call")
    _set_call(conversation, later, later.actions[0], "shared-call")
    return "LINK-UNIQUE", (earlier.actions[0], later.actions[0])


def inject_shared_text(conversation, data):
    batches = [turn for turn in conversation.turns if len(turn.actions) >= 2]
    if not batches:
        return None
    turn = data.draw(st.sampled_from(batches))
    index = data.draw(st.integers(1, len(turn.actions) - 1))
    conversation.replace(turn.actions[index], thought="said twice")
    return "PROJECT-SHARED-TEXT", (turn.actions[index], turn.actions[0])


def inject_wrong_link(conversation, data):
    results = [r for t in conversation.turns for r in t.result_of.values()]
    if not results:
        return None
    result_id = data.draw(st.sampled_from(results))
    result = conversation.events[conversation.position(result_id)]
    if result.kind == "agent_error":
        conversation.replace(result_id, tool_call_id="no-such-call")
        return "LINK-ID", (result_id,)
    conversation.replace(result_id, action_id="u0")
    return "LINK-ID", (result_id, "u0")


def inject_second_result(conversation, data):
    answered = [(a, r) for t in conversation.turns for a, r in t.result_of.items()]
    if not answered:
        return None
    action_id, result_id = data.draw(st.sampled_from(answered))
    result = conversation.events[conversation.position(result_id)]
    conversation.events.append(result.model_copy(update={"id": "again", "parent_id": result_id}))
    return "LINK-ONCE", (action_id, result_id, "again")


def inject_orphan(conversation, data):
    answered = [(a, r) for t in conversation.turns for a, r in t.result_of.items()]
    if not answered:
        return None
    action_id, result_id = data.draw(st.sampled_from(answered))
    result = conversation.events[conversation.position(result_id)]
    # A pause in the result's place keeps the tree and loses the answer.
    position = conversation.position(result_id)
    conversation.events[position] = PauseEvent(id=result_id, parent_id=result.parent_id)
    conversation.events.append(MessageEvent(id="asked", source="agent", parent_id=result_id))
    return "LINK-ORPHAN", action_id


INJECTIONS = [
    inject_duplicate_id,
    inject_missing_parent,
    inject_parent_after_child,
    inject_cycle,
    inject_dup_call_in_batch,
    inject_dup_call_across_responses,
    inject_shared_text,
    inject_wrong_link,
    inject_second_result,
    inject_orphan,
]


def _set_call(conversation, turn, action_id, call):
    conversation.replace(action_id, tool_call_id=call)
    if action_id in turn.result_of:
        conversation.replace(turn.result_of[action_id], tool_call_id=call)


@given(conversations(), st.sampled_from(INJECTIONS), st.data())
def test_an_injected_fault_is_named(conversation, inject, data):
    fault = inject(conversation, data)
    if fault is None:  # this conversation has nothing of the shape the fault needs
        return
    contract, ids = fault
    report = audit_events(conversation.events)
    reported = named(report, contract)
    if contract == "TREE-CYCLE":
        assert ids in {frozenset(cycle) for cycle in reported}, report.violations
    elif contract == "LINK-ORPHAN":
        assert ids in {orphan[0] for orphan in reported}, report.violations
    else:
        assert ids in reported, report.violations


def test_head_that_is_not_in_the_log_is_named():
    report = audit_events([MessageEvent(id="u0", source="user", parent_id=ROOT)], head="gone")
    assert named(report, "TREE-HEAD") == [("gone",)]


# -- any parent links at all -------------------------------------------------------------


@st.composite
def tangled_logs(draw) -> list[EventBase]:
    """Events whose parents, ids, calls and links are drawn from tiny pools: duplicates,
    cycles, forward and missing parents, crossed links, all mixed."""
    size = draw(st.integers(1, 12))
    # Mostly distinct ids, and parents mostly earlier events (branches), so that the faults
    # sit among well-formed branches as well as among each other.
    ids = [f"e{draw(st.integers(0, size)) if draw(st.booleans()) else n}" for n in range(size)]
    anything = st.sampled_from([None, ROOT, "ghost", *ids])
    calls = st.sampled_from(["c1", "c2", "c3"])
    events: list[EventBase] = []
    for position, event_id in enumerate(ids):
        earlier = st.sampled_from(ids[:position]) if position else anything
        common = {"id": event_id, "parent_id": draw(st.one_of(earlier, anything))}
        kind = draw(
            st.sampled_from(["user", "agent", "action", "action", "observation", "error", "pause"])
        )
        if kind in ("user", "agent"):
            events.append(MessageEvent(**common, source=kind))
        elif kind == "action":
            thought = draw(st.sampled_from(["", "text"]))
            response = draw(st.sampled_from(["r1", "r2"]))
            events.append(
                ActionEvent(
                    **common,
                    llm_response_id=response,
                    tool_call_id=draw(calls),
                    tool_name="t",
                    raw_arguments="{}",
                    thought=thought,
                )
            )
        elif kind == "observation":
            action_id = draw(st.sampled_from([*ids, "nobody"]))
            events.append(
                ObservationEvent(
                    **common, action_id=action_id, tool_call_id=draw(calls), tool_name="t"
                )
            )
        elif kind == "error":
            action_id = draw(st.sampled_from([None, *ids]))
            events.append(
                AgentErrorEvent(
                    **common,
                    action_id=action_id,
                    tool_call_id=draw(calls),
                    tool_name="t",
                    error="e",
                )
            )
        else:
            events.append(PauseEvent(**common))
    return events


def naive_parents(events: list[EventBase]) -> list[int | None]:
    """TREE-PARENT by the book; None for a root, -1 for a missing parent."""
    first: dict[str, int] = {}
    for position, event in enumerate(events):
        first.setdefault(event.id, position)
    parents: list[int | None] = []
    for position, event in enumerate(events):
        if event.parent_id is None:
            parents.append(position - 1 if position else None)
        elif event.parent_id == ROOT:
            parents.append(None)
        else:
            parents.append(first.get(event.parent_id, -1))
    return parents


def naive_cycles(parents: list[int | None]) -> set[frozenset[int]]:
    cycles = set()
    for start in range(len(parents)):
        members, position = [], parents[start]
        members.append(start)
        for _ in range(len(parents)):
            if position is None or position < 0 or position == start:
                break
            members.append(position)
            position = parents[position]
        if position == start:
            cycles.add(frozenset(members))
    return cycles


@given(tangled_logs())
def test_any_parent_links_give_exactly_the_tree_faults_and_never_raise(events):
    report = audit_events(events)
    parents = naive_parents(events)
    cycles = naive_cycles(parents)
    on_cycle = set().union(*cycles)
    ids = [event.id for event in events]

    assert {frozenset(c) for c in named(report, "TREE-CYCLE")} == {
        frozenset(ids[p] for p in cycle) for cycle in cycles
    }
    assert len(named(report, "TREE-CYCLE")) == len(cycles)
    assert named(report, "TREE-MISSING") == [
        (ids[p], events[p].parent_id) for p, parent in enumerate(parents) if parent == -1
    ]
    assert named(report, "TREE-PARENT") == [
        (ids[p], ids[parent])
        for p, parent in enumerate(parents)
        if parent is not None and parent > p and p not in on_cycle
    ]
    repeated = [i for position, i in enumerate(ids) if i in ids[:position]]
    assert named(report, "APPEND-DUP-ID") == [(i,) for i in dict.fromkeys(repeated)]
    assert sum(report.counts.values()) == len(events)
    assert report.heads == EventTree(events).heads()
    assert set(report.pending) <= {e.id for e in events if e.kind == "action"}
    report.to_json_dict()


class NaiveAudit:
    """The path contracts by their definitions: every event scans its own whole path.
    Quadratic, obviously right, and independent of the walk's enter/leave bookkeeping."""

    def __init__(self, events: list[EventBase]) -> None:
        self.events = events
        parents = naive_parents(events)
        self.forest = [None if parent is None or parent < 0 else parent for parent in parents]
        for cycle in naive_cycles(parents):
            self.forest[min(cycle)] = None  # the audit cuts each cycle at its earliest event
        self.links: dict[int, int | None] = {}
        self.found: list[tuple[str, tuple[str, ...]]] = []
        self.orphans: set[int] = set()
        for position, event in enumerate(events):
            if event.kind == "action":
                self.check_action(position)
            elif event.kind in RESULT_KINDS:
                self.link(position)
            if event.kind == "action" or (event.kind == "message" and event.source == "agent"):
                self.check_turn(position)

    def path(self, position: int) -> list[int]:
        chain = []
        while position is not None:
            chain.append(position)
            position = self.forest[position]
        return chain[::-1]

    def batch_first(self, position: int) -> int:
        events, first = self.events, position
        for earlier in reversed(self.path(position)[:-1]):
            kind = events[earlier].kind
            if kind not in MODEL_VISIBLE_KINDS:
                continue
            if (
                kind != "action"
                or events[earlier].llm_response_id != events[position].llm_response_id
            ):
                break
            first = earlier
        return first

    def check_action(self, position: int) -> None:
        events, action = self.events, self.events[position]
        first = self.batch_first(position)
        if first != position and action.has_shared_text:
            self.found.append(("PROJECT-SHARED-TEXT", (action.id, events[first].id)))
        same_call = [
            q
            for q in self.path(position)[:-1]
            if events[q].kind == "action" and events[q].tool_call_id == action.tool_call_id
        ]
        if same_call:
            earlier = same_call[-1]
            same_batch = self.batch_first(earlier) == first
            contract = "PROJECT-DUP-CALL" if same_batch else "LINK-UNIQUE"
            self.found.append((contract, (events[earlier].id, action.id)))

    def link(self, position: int) -> int | None:
        """The action the result at ``position`` validly answers (reporting LINK-ID and
        LINK-ONCE the first time it is asked)."""
        if position in self.links:
            return self.links[position]
        events, result = self.events, self.events[position]
        prefix = self.path(position)[:-1]
        actions = [q for q in prefix if events[q].kind == "action"]
        action_id = getattr(result, "action_id", None)
        if action_id is None:
            matches = [q for q in actions if events[q].tool_call_id == result.tool_call_id]
            ids: tuple[str, ...] = (result.id,)
        else:
            matches = [q for q in actions if events[q].id == action_id]
            ids = (result.id, action_id)
        action = matches[-1] if matches else None
        if action is not None and action_id is not None:
            linked = events[action]
            wrong_tool = result.kind != "agent_error" and result.tool_name != linked.tool_name
            if result.tool_call_id != linked.tool_call_id or wrong_tool:
                action = None
        if action is None:
            self.found.append(("LINK-ID", ids))
        else:
            closers = [
                q for q in prefix if events[q].kind in RESULT_KINDS and self.link(q) == action
            ]
            if closers:
                self.found.append(
                    ("LINK-ONCE", (events[action].id, events[closers[0]].id, result.id))
                )
                action = None  # a second result closes nothing more
        self.links[position] = action
        return action

    def check_turn(self, position: int) -> None:
        events, turn = self.events, self.events[position]
        prefix = self.path(position)[:-1]
        answered = {self.link(q) for q in prefix if events[q].kind in RESULT_KINDS}
        for q in prefix:
            if events[q].kind != "action" or q in answered:
                continue
            if turn.kind == "action" and events[q].llm_response_id == turn.llm_response_id:
                continue
            self.orphans.add(q)


PATH_CONTRACTS = {
    "PROJECT-SHARED-TEXT",
    "PROJECT-DUP-CALL",
    "LINK-UNIQUE",
    "LINK-ID",
    "LINK-ONCE",
}


@given(tangled_logs())
def test_path_contracts_match_a_naive_scan_of_every_events_own_path(events):
    report = audit_events(events)
    naive = NaiveAudit(events)
    reported = [
        (v.contract, v.event_ids) for v in report.violations if v.contract in PATH_CONTRACTS
    ]
    assert sorted(reported) == sorted(naive.found)
    orphans = sorted(ids[0] for ids in named(report, "LINK-ORPHAN"))
    assert orphans == sorted(events[position].id for position in naive.orphans)
