"""The server's audit cache (server/audit_cache.py), in process over both backends: answers
equal a full audit of the stored log after appends made through another store handle (as
another server or runtime sharing the store makes them), are kept until an event or the head
changes, list at most ``violations_limit`` violations with exact totals, and the events held
over all conversations stay under the bound, as lean records, never decoded events."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest

from support.postgres import fresh_schema_url
from treadle.api import AuditView
from treadle.events.audit import audit_events
from treadle.events.audit_facts import AuditFacts
from treadle.events.model import ROOT, ActionEvent, MessageEvent
from treadle.server.audit_cache import AuditCache
from treadle.store.base import EventStore
from treadle.store.urls import open_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        with fresh_schema_url() as url:
            yield url


def _full(store: EventStore, conversation: str, head: str | None, limit: int = 1000) -> dict:
    events = [row.event for row in store.get_range(conversation, 0, 10**9)]
    focus = head if head is not None else store.head(conversation)
    return audit_events(events, head=focus).to_summary_dict(limit)


def _calls(count: int, parent: str, call: str = "same") -> list[ActionEvent]:
    """``count`` responses of one action each, all with tool call id ``call`` on one path:
    each repeat is a LINK-UNIQUE, each unanswered action a LINK-ORPHAN."""
    actions = []
    prefix = f"{parent}-{call}"
    for index in range(count):
        action = ActionEvent(
            id=f"{prefix}-a{index}",
            parent_id=parent,
            llm_response_id=f"{prefix}-r{index}",
            tool_call_id=call,
            tool_name="terminal",
            arguments={},
            raw_arguments="{}",
        )
        actions.append(action)
        parent = action.id
    return actions


def test_answers_follow_another_handle_and_are_kept(store_url: str) -> None:
    server_side, other = open_store(store_url), open_store(store_url)
    cache = AuditCache()
    try:
        server_side.create_conversation("c")
        other.append("c", MessageEvent(id="m0", source="user", text="go", parent_id=ROOT))
        first = cache.answer(server_side, "c", None)
        assert json.loads(first) == _full(other, "c", None)
        assert cache.answer(server_side, "c", None) is first  # nothing new: the kept bytes

        other.append_batch("c", _calls(3, "m0"))  # another process appends
        grown = cache.answer(server_side, "c", None)
        assert grown is not first
        assert json.loads(grown) == _full(other, "c", None)
        assert json.loads(grown)["violations_total"] == 4

        other.set_head("c", "m0")  # the head moves, no event: another answer
        moved = json.loads(cache.answer(server_side, "c", None))
        assert moved["head"] == "m0"
        assert moved == _full(other, "c", None)
        assert json.loads(cache.answer(server_side, "c", "m0-same-a1")) == _full(
            other, "c", "m0-same-a1"
        )

        other.append("c", MessageEvent(id="fork", source="user", text="again", parent_id="m0"))
        assert json.loads(cache.answer(server_side, "c", None)) == _full(other, "c", None)
    finally:
        server_side.close()
        other.close()


def test_violations_are_listed_up_to_the_limit_and_counted_in_full(store_url: str) -> None:
    store = open_store(store_url)
    cache = AuditCache()
    try:
        store.create_conversation("c")
        store.append("c", MessageEvent(id="m0", source="user", text="go", parent_id=ROOT))
        store.append_batch("c", _calls(40, "m0"))
        full = _full(store, "c", None, limit=10**6)
        answer = json.loads(cache.answer(store, "c", None, violations_limit=5))
        assert answer["violations"] == full["violations"][:5]
        assert answer["violations_total"] == len(full["violations"]) == 39 + 39
        assert answer["violation_counts"] == {"LINK-UNIQUE": 39, "LINK-ORPHAN": 39}
        assert answer["violation_counts"] == dict(
            Counter(v["contract"] for v in full["violations"])
        )
        assert answer["truncated"] is True
        view = AuditView.model_validate(answer)
        assert view.total == 78
        assert not view.clean
        whole = json.loads(cache.answer(store, "c", None, violations_limit=1000))
        assert whole["truncated"] is False
        assert len(whole["violations"]) == 78
    finally:
        store.close()


def test_events_held_stay_under_the_bound(store_url: str) -> None:
    store = open_store(store_url)
    cache = AuditCache(kept=8, events_kept=100)
    try:
        for name in ("a", "b", "c"):
            store.create_conversation(name)
            store.append(
                name, MessageEvent(id=f"{name}0", source="user", text="go", parent_id=ROOT)
            )
            store.append_batch(name, _calls(39, f"{name}0", call=name))
        for name in ("a", "b", "c"):
            cache.answer(store, name, None)
            assert sum(cache.held().values()) <= 100
        assert cache.held() == {"b": 40, "c": 40}  # the least recently read went first
        cache.answer(store, "a", None)
        assert cache.held() == {"c": 40, "a": 40}
        entry = cache._entries["a"]
        assert all(type(fact) is AuditFacts for fact in entry.audit.events)  # not events
        store.append_batch("a", _calls(200, "a0-a-a38", call="x"))
        cache.answer(store, "a", None)  # alone over the bound: kept, the others dropped
        assert cache.held() == {"a": 240}
        assert json.loads(cache.answer(store, "a", None)) == _full(store, "a", None)
    finally:
        store.close()


def test_a_re_created_conversation_is_audited_afresh(store_url: str) -> None:
    store = open_store(store_url)
    cache = AuditCache()
    try:
        store.create_conversation("c")
        store.append_batch("c", [MessageEvent(id="m0", source="user", text="go", parent_id=ROOT)])
        store.append_batch("c", _calls(3, "m0"))
        assert json.loads(cache.answer(store, "c", None))["violations_total"] == 4
        store.delete_conversation("c")
        store.create_conversation("c")
        store.append("c", MessageEvent(id="new", source="user", text="hi", parent_id=ROOT))
        again = json.loads(cache.answer(store, "c", None))
        assert again == _full(store, "c", None)
        assert again["violations_total"] == 0
        assert again["heads"] == ["new"]
    finally:
        store.close()
