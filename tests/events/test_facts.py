"""The registry of facts (events/facts.py): every key Treadle writes has a model, the runtime's
writes are checked against it before anything is stored, and facts of other shapes (imported,
older) still read."""

from __future__ import annotations

import json

import pytest

from treadle.data.status import ConversationStatus
from treadle.events import fact_keys
from treadle.events.facts import (
    FACTS,
    FactRefused,
    SnapshotFact,
    StatusFact,
    check_fact,
    read_fact,
)
from treadle.events.model import ROOT, MessageEvent, StateChangeEvent, events_json_schema
from treadle.runtime.log import ConversationLog
from treadle.runtime.status import read_status
from treadle.store.urls import open_store


@pytest.fixture
def store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path / 'facts.db'}")
    yield opened
    opened.close()


def test_every_key_has_a_model_and_a_schema():
    keys = {value for name, value in vars(fact_keys).items() if name.endswith("_KEY")}
    assert keys == set(FACTS)
    schema = events_json_schema()
    assert set(schema["facts"]) == keys
    assert schema["facts"]["status"]["properties"]["status"]["enum"] == [
        status.value for status in ConversationStatus
    ]
    assert "from" in schema["facts"]["model"]["properties"]  # the stored name, not from_
    assert json.dumps(schema)


def test_an_unknown_key_is_refused_naming_it():
    with pytest.raises(FactRefused, match=r"'notes' is not a fact Treadle records"):
        check_fact("notes", {"x": 1})


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("status", {"status": "done"}, "status"),
        ("status", "running", "value"),
        ("pause_request", {"kind": "stop"}, "kind"),
        ("tool_call_ids", {"llm_response_id": "r", "renamed": [{"action_id": "a"}]}, "renamed.0"),
        (
            "context_limit",
            {"tokens": 0, "source": "provider", "refused_tokens": 9, "budget": 1},
            "tokens",
        ),
        ("budget", {"max_cost_usd": {"from": 1.0, "to": 2.0}, "max_steps": {}}, "max_steps"),
    ],
)
def test_a_value_of_the_wrong_shape_is_refused_naming_the_field(key, value, named):
    with pytest.raises(FactRefused, match=rf"{key!r} has a value of the wrong shape: {named}"):
        check_fact(key, value)


def test_fields_of_a_newer_treadle_are_kept():
    fact = check_fact("status", {"status": "paused", "reason": "r", "since": 3})
    assert isinstance(fact, StatusFact)
    assert fact.model_extra == {"since": 3}


def test_the_runtime_stores_nothing_of_a_refused_fact(store):
    store.create_conversation("c")
    log = ConversationLog(store, "c")
    (first,) = log.append([MessageEvent(source="user", text="hi")])
    with pytest.raises(FactRefused, match="kind"):
        log.record_fact("pause_request", {"kind": "later"})
    with pytest.raises(FactRefused, match="'status'"):
        log.append(
            [MessageEvent(source="user", text="lost"), StateChangeEvent(key="status", value={})]
        )
    with pytest.raises(FactRefused, match="'unknown'"):
        log.append_side(StateChangeEvent(key="unknown", value=1, parent_id=first.id))
    assert log.last_seq() == 0  # the message only: no batch half-stored
    assert log.head == first.id


def test_facts_of_other_shapes_still_read(store):
    """A log brought from elsewhere keeps its facts as they are, and readers fall back."""
    store.create_conversation("c")
    imported = [
        StateChangeEvent(key="status", value={"status": "archived"}, parent_id=ROOT),
        StateChangeEvent(key="agent_state", value={"anything": [1]}, parent_id=ROOT),
        StateChangeEvent(key="snapshot", value={"id": 7}, parent_id=ROOT),
    ]
    store.append_batch("c", imported, move_head=False)  # the store itself checks no fact
    stored = [item.event.value for item in store.get_range("c", 0, 10)]
    assert stored[1] == {"anything": (1,)}  # frozen JSON: a list reads as a tuple
    assert read_fact(SnapshotFact, stored[2]) is None
    assert read_status(store, "c")[0] is not None  # an unknown status does not break reading
