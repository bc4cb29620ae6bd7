"""A store's audit reads a condensation's forgotten ids from its columns (``audit_facts``,
no payload decoding) on SQLite and PostgreSQL: the CONDENSE checks find the same as on the
decoded events."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.postgres import fresh_schema_url
from treadle.events.audit import audit_events
from treadle.events.model import (
    ROOT,
    ActionEvent,
    CondensationEvent,
    MessageEvent,
    ObservationEvent,
)
from treadle.store.urls import open_store


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'facts.db'}"
    else:
        with fresh_schema_url("treadle_condense") as url:
            yield url


def test_condense_checks_from_a_stores_audit_facts(store_url: str) -> None:
    action = ActionEvent(
        id="x", llm_response_id="r", tool_call_id="cx", tool_name="think", raw_arguments="{}"
    )
    events = [
        MessageEvent(id="u1", source="user", text="go", parent_id=ROOT),
        action.model_copy(update={"parent_id": "u1"}),
        ObservationEvent(
            id="ox", action_id="x", tool_call_id="cx", tool_name="think", parent_id="x"
        ),
        MessageEvent(id="u2", source="user", text="more", parent_id="ox"),
        CondensationEvent(id="k1", forgotten_event_ids=("x",), summary="s", parent_id="u2"),
        CondensationEvent(id="k2", forgotten_event_ids=("ox",), parent_id="k1"),
    ]
    store = open_store(store_url)
    try:
        conversation = store.create_conversation().id
        store.append_batch(conversation, events)
        facts = store.audit_facts(conversation, 0, len(events))
    finally:
        store.close()
    from_facts = audit_events(facts).to_json_dict()["violations"]
    assert from_facts == audit_events(events).to_json_dict()["violations"]
    assert [v["contract"] for v in from_facts] == ["CONDENSE-SPLIT", "CONDENSE-LOOP"]
    assert facts[4].forgotten == ("x",)
