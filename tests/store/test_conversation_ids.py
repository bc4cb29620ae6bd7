"""Conversation ids follow one rule on every backend and every way in (issue 10, item 8): an
id a store accepts can be reached by URL, exported as a folder and deleted."""

from __future__ import annotations

import pytest

from treadle.data.ids import CONVERSATION_ID_MAX
from treadle.store.base import EventStore, StoreError
from treadle.store.checks import InvalidConversationId


@pytest.mark.parametrize(
    "bad",
    ["", "a/b", "..", ".", ".hidden", "-x", "a b", "a\x00b", "\ud800", "é", "x" * 129, "a\\b"],
)
def test_ids_outside_the_rule_are_refused_and_nothing_is_stored(store: EventStore, bad: str):
    with pytest.raises(InvalidConversationId) as caught:
        store.create_conversation(bad)
    assert "not allowed" in str(caught.value)
    assert isinstance(caught.value, StoreError)
    assert isinstance(caught.value, ValueError)
    assert store.list_conversations() == []


def test_ids_inside_the_rule_are_stored(store: EventStore):
    good = [
        "c",
        "conv-1",
        "0f1e2d3c-aaaa-4bbb-8ccc-123456789abc",
        "A_b.c:d",
        "z" * CONVERSATION_ID_MAX,
    ]
    for conversation_id in good:
        assert store.create_conversation(conversation_id).id == conversation_id
    assert [info.id for info in store.list_conversations()] == good


def test_a_title_with_a_lone_surrogate_is_refused_clearly(store: EventStore):
    with pytest.raises(StoreError, match="lone surrogate"):
        store.create_conversation("c", title="bad \ud800")
    assert store.list_conversations() == []
    store.create_conversation("c", title="fine")
    with pytest.raises(StoreError, match="lone surrogate"):
        store.update_conversation("c", title="\udfff")
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        store.create_conversation("d", metadata={"x": "\ud800"})
    assert store.get_conversation("c").title == "fine"
