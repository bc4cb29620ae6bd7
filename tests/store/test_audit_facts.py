"""``EventStore.audit_facts``: what the audit reads of stored events, from columns and a few
payload fields, without decoding. An audit of those records equals the audit of the decoded
events, for random logs with branches, legacy parents, new roots and broken links, on every
backend, whatever range is read."""

from __future__ import annotations

import random

from treadle.errors import TreadleError
from treadle.events.audit import IncrementalAudit, audit_events
from treadle.events.audit_facts import AuditFacts
from treadle.events.model import (
    ROOT,
    ActionEvent,
    AgentErrorEvent,
    EventBase,
    MessageEvent,
    ObservationEvent,
    StateChangeEvent,
    UserRejectionEvent,
)
from treadle.store.base import EventStore


def _random_event(rng: random.Random, index: int, stored: list[EventBase]) -> EventBase:
    where = rng.choice(["last", "last", "last", "legacy", "fork", "root"])
    if not stored or where == "root":
        parent: str | None = ROOT
    elif where == "last":
        parent = stored[-1].id
    elif where == "legacy":
        parent = None
    else:
        parent = rng.choice(stored).id
    common = {"id": f"e{index}", "parent_id": parent}
    actions = [event for event in stored if isinstance(event, ActionEvent)]
    kind = rng.choice(["user", "agent", "action", "action", "result", "result", "state"])
    if kind == "action":
        return ActionEvent(
            llm_response_id=f"r{rng.randint(0, 3)}",
            tool_call_id=f"c{rng.randint(0, 5)}",
            tool_name=rng.choice(["terminal", "editor"]),
            arguments={},
            raw_arguments="{}",
            thought=rng.choice(["", "why"]),
            reasoning=rng.choice([None, "", "because"]),
            **common,
        )
    if kind == "result" and actions:
        action = rng.choice(actions)
        links = {"tool_call_id": action.tool_call_id, "tool_name": action.tool_name}
        made = rng.choice(["observation", "error", "error-no-id", "rejection", "wrong-name"])
        if made == "observation":
            return ObservationEvent(action_id=action.id, content="ok", **links, **common)
        if made == "wrong-name":
            links["tool_name"] = "other"
            return ObservationEvent(action_id=action.id, content="ok", **links, **common)
        if made == "rejection":
            return UserRejectionEvent(action_id=action.id, **links, **common)
        action_id = action.id if made == "error" else None
        return AgentErrorEvent(action_id=action_id, error="bad", **links, **common)
    if kind == "state":
        return StateChangeEvent(key="status", value={"status": "idle"}, **common)
    return MessageEvent(source="agent" if kind == "agent" else "user", text="hi", **common)


def _random_log(store: EventStore, conversation: str, seed: int) -> list[EventBase]:
    rng = random.Random(seed)
    store.create_conversation(conversation)
    stored: list[EventBase] = []
    for index in range(rng.randint(1, 60)):
        event = _random_event(rng, index, stored)
        try:
            store.append(conversation, event, move_head=rng.random() < 0.9)
        except TreadleError:
            continue  # a store refuses it (APPEND-*): the log is what was stored
        stored.append(event)
    return [row.event for row in store.get_range(conversation, 0, 10**9)]


def test_audit_of_facts_equals_audit_of_events(store: EventStore) -> None:
    for seed in range(25):
        conversation = f"c{seed}"
        events = _random_log(store, conversation, seed)
        count = len(events)
        facts = store.audit_facts(conversation, 0, count)
        assert all(isinstance(fact, AuditFacts) for fact in facts)
        assert [fact.id for fact in facts] == [event.id for event in events]
        head = store.head(conversation)
        assert audit_events(facts, head=head) == audit_events(events, head=head), seed
        rng = random.Random(seed)
        cut = rng.randint(0, count)
        assert store.audit_facts(conversation, cut, count) == facts[cut:], seed
        audit = IncrementalAudit(store.audit_facts(conversation, 0, cut))
        audit.extend(store.audit_facts(conversation, cut, count))
        for focus in (head, events[0].id, events[-1].id):
            assert audit.report(focus) == audit_events(events, head=focus), (seed, focus)


def test_facts_carry_the_link_fields(store: EventStore) -> None:
    store.create_conversation("c")
    action = ActionEvent(
        id="a",
        parent_id=ROOT,
        llm_response_id="r",
        tool_call_id="call",
        tool_name="terminal",
        arguments={},
        raw_arguments="{}",
        reasoning="because",
    )
    error = AgentErrorEvent(id="x", parent_id="a", tool_call_id="call", tool_name="t", error="e")
    store.append_batch("c", [action, error])
    first, second = store.audit_facts("c", 0, 2)
    assert first == AuditFacts("a", ROOT, "action", "agent", "call", "terminal", None, "r", True)
    assert second == AuditFacts("x", "a", "agent_error", "agent", "call", "t", None, None, False)
    assert store.audit_facts("c", 1, 2) == [second]
    assert store.audit_facts("c", 2, 5) == []
