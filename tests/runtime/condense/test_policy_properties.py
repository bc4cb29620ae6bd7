"""Properties of the condensation policy over random paths (hypothesis): parallel batches,
late results, agent errors, rejections, pending calls, pauses and earlier condensations. A
condensation the policy chooses never breaks CONDENSE-SPLIT, CONDENSE-PENDING or
CONDENSE-LOOP (checked twice: by the audit and by a naive reference here), keeps the head,
and leaves a projection a strict provider accepts (CONDENSE-VALID)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from support.provider_history import provider_history_problems
from treadle.events.audit import IncrementalAudit, audit_events
from treadle.events.model import (
    RESULT_KINDS,
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    SystemPromptEvent,
    UserRejectionEvent,
)
from treadle.events.projection import condensed_view, project_messages
from treadle.runtime.condense.policy import may_condense, plan_condensation

CONDENSE = ("CONDENSE-SPLIT", "CONDENSE-PENDING", "CONDENSE-LOOP")


class PathBuilder:
    def __init__(self) -> None:
        self.path: list = [SystemPromptEvent(id="sys", text="system")]
        self.pending: list[ActionEvent] = []
        self.count = 0

    def new_id(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def add(self, event) -> None:
        parent = self.path[-1].id if self.path else None
        self.path.append(event.model_copy(update={"parent_id": parent}))

    def user(self) -> None:
        self.add(MessageEvent(id=self.new_id("u"), source="user", text="do it " * 3))

    def agent(self) -> None:
        self.add(MessageEvent(id=self.new_id("m"), source="agent", text="ok"))

    def response(self, calls: int) -> None:
        response = self.new_id("r")
        for index in range(calls):
            action_id = self.new_id("a")
            action = ActionEvent(
                id=action_id,
                llm_response_id=response,
                tool_call_id=f"c-{action_id}",
                tool_name="terminal",
                raw_arguments=json.dumps({"command": f"echo {action_id}"}),
                thought="thinking" if index == 0 else "",
            )
            self.add(action)
            self.pending.append(action)

    def answer(self, which: int, how: str) -> None:
        if not self.pending:
            return
        action = self.pending.pop(which % len(self.pending))
        common = {"tool_call_id": action.tool_call_id, "tool_name": action.tool_name}
        if how == "observation":
            event = ObservationEvent(
                id=self.new_id("o"), action_id=action.id, content="out " * 5, **common
            )
        elif how == "error":
            event = AgentErrorEvent(id=self.new_id("e"), error="bad", **common)
        else:
            event = UserRejectionEvent(id=self.new_id("j"), action_id=action.id, **common)
        self.add(event)

    def condense(self, keep: int) -> CondensationEvent | None:
        """What the runtime does: the policy's plan, as a condensation event."""
        if not may_condense(self.path):
            return None
        view = condensed_view(self.path)
        plan = plan_condensation(view, [size(item) for item in view], keep_recent_tokens=keep)
        if plan is None:
            return None
        event = CondensationEvent(
            id=self.new_id("k"),
            forgotten_event_ids=plan.forgotten_ids,
            summary="summary",
            summary_offset=plan.summary_offset,
        )
        self.add(event)
        return event


def size(item) -> int:
    return 1 + len(getattr(item, "text", "") or "") // 4


OPS = st.one_of(
    st.just(("user",)),
    st.just(("agent",)),
    st.just(("pause",)),
    st.tuples(st.just("response"), st.integers(1, 4)),
    st.tuples(
        st.just("answer"),
        st.integers(0, 10),
        st.sampled_from(["observation", "observation", "error", "rejection"]),
    ),
    st.tuples(st.just("condense"), st.integers(0, 40)),
)


def build(ops) -> PathBuilder:
    builder = PathBuilder()
    builder.user()
    for op in ops:
        if op[0] == "user":
            builder.user()
        elif op[0] == "agent":
            builder.agent()
        elif op[0] == "pause":
            builder.add(PauseEvent(id=builder.new_id("p")))
        elif op[0] == "response":
            builder.response(op[1])
        elif op[0] == "answer":
            builder.answer(op[1], op[2])
        else:
            builder.condense(op[1])
    return builder


def reference_problems(path) -> list[str]:
    """CONDENSE-SPLIT / -PENDING / -LOOP by brute force over the path, for cross-checking."""
    problems: list[str] = []
    forgotten: set[str] = set()
    for index, event in enumerate(path):
        if not isinstance(event, CondensationEvent):
            continue
        before = path[:index]
        last_other = next(
            (e for e in reversed(before) if e.kind not in ("pause", "state_change")), None
        )
        if last_other is not None and last_other.kind == "condensation":
            problems.append(f"LOOP at {event.id}")
        forgotten |= set(event.forgotten_event_ids)
        actions = {e.id: e for e in before if isinstance(e, ActionEvent)}
        by_call = {a.tool_call_id: a.id for a in actions.values()}
        results = {
            e.action_id or by_call[e.tool_call_id]: e for e in before if e.kind in RESULT_KINDS
        }
        for action in actions.values():
            result = results.get(action.id)
            if action.id in event.forgotten_event_ids and result is None:
                problems.append(f"PENDING {action.id}")
            if result is not None and (action.id in forgotten) != (result.id in forgotten):
                problems.append(f"SPLIT pair {action.id}/{result.id}")
        by_response: dict[str, set[bool]] = {}
        for action in actions.values():
            by_response.setdefault(action.llm_response_id, set()).add(action.id in forgotten)
        problems += [f"SPLIT batch {r}" for r, seen in by_response.items() if len(seen) > 1]
    return problems


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=60), st.integers(0, 60))
def test_a_chosen_condensation_keeps_the_contracts(ops, keep):
    builder = build(ops)
    made = builder.condense(keep)
    path = builder.path
    report = audit_events(path)
    assert [v for v in report.violations if v.contract in CONDENSE] == [], report.violations
    assert reference_problems(path) == []
    incremental = IncrementalAudit()
    for event in path:  # the store's audit, fed one append at a time, agrees
        incremental.extend([event])
    assert incremental.report().to_json_dict() == report.to_json_dict()
    # Everything the policy forgets is answered; the head is never forgotten.
    pending = {action.id for action in builder.pending}
    every_forgotten = {i for e in path if e.kind == "condensation" for i in e.forgotten_event_ids}
    assert not every_forgotten & pending
    assert not every_forgotten & {"sys", "u1"}
    # What is sent stays a valid provider history (CONDENSE-VALID).
    assert provider_history_problems(project_messages(path)) == []
    if made is not None:
        assert not may_condense(path)  # CONDENSE-LOOP: not again before something new
        messages = project_messages(path)
        assert messages[0] == {"role": "system", "content": "system"}
        assert "do it" in json.dumps(messages[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(OPS, max_size=60))
def test_the_tail_holds_the_window_when_it_can(ops):
    builder = build(ops)
    view = condensed_view(builder.path)
    sizes = [size(item) for item in view]
    plan = plan_condensation(view, sizes, keep_recent_tokens=20)
    if plan is None:
        return
    assert 0 < plan.head < plan.tail < len(view)  # something forgotten, something kept
    # Cut where the policy says, the kept span is whole: the cut right before it is one a
    # strict provider accepts, and nothing pending was in the forgotten span.
    forgotten = set(plan.forgotten_ids)
    assert not forgotten & {a.id for a in builder.pending}


def test_random_paths_do_condense():
    """The properties above are not vacuous: the generator's paths get condensed, several
    times, around pending calls and parallel batches."""
    three = [("response", 3), ("answer", 2, "observation"), ("user",), ("answer", 0, "error")]
    three += [("answer", 0, "observation")]  # a late result: after a user message
    ops = three * 2 + [("response", 2), ("answer", 1, "rejection"), ("answer", 0, "error")]
    ops += [("condense", 5)]
    ops += [("response", 2), ("answer", 0, "observation"), ("answer", 0, "observation")] * 3
    ops += [("agent",), ("user",), ("condense", 5), ("response", 2), ("answer", 0, "error")]
    builder = build(ops)
    builder.condense(0)
    condensations = [e for e in builder.path if e.kind == "condensation"]
    assert len(condensations) == 3
    assert all(e.forgotten_event_ids for e in condensations)
    assert audit_events(builder.path).clean
    # The last response (one call answered, one pending) is kept whole.
    (pending,) = builder.pending
    response = [
        e for e in builder.path if getattr(e, "llm_response_id", None) == pending.llm_response_id
    ]
    assert len(response) == 2
    for event in builder.path:
        if event.kind == "condensation":
            assert not {e.id for e in response} & set(event.forgotten_event_ids)
    assert provider_history_problems(project_messages(builder.path)) == []
