"""Budgets through the runtime: a cost budget reached through the real LiteLLM path (LiteLLM
prices a known model's usage; the provider is a local fake) pauses the run before the next
model call, naming the budget and the figures; raising it continues; lowering is refused; a
summary call counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.fake_openai import FakeOpenAIServer
from support.scripts import think_steps
from treadle.runtime.budget import BUDGET_KEY, Budget, BudgetLowered
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status
from treadle.store.urls import open_store


def think(number: int) -> dict:
    return {"tool_calls": [{"name": "think", "arguments": {"thought": f"step {number}"}}]}


FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def test_a_cost_budget_through_litellm_pauses_then_a_raise_continues(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'budget.db'}")
    replies = [think(1), think(2), think(3), think(4), FINISH]
    with FakeOpenAIServer(replies) as server:
        # gpt-4o-mini is priced by LiteLLM: each call of the fake's usage (11 in, 7 out) costs
        # about $0.0000059, so a budget of $0.00001 allows two calls.
        settings = ConversationSettings.litellm(
            "openai/gpt-4o-mini", tmp_path / "ws", server.base_url, max_cost_usd=0.00001
        )
        with Conversation.create(store, settings, model_key="sk-test-0123456789abcdef") as conv:
            conv.send_message("think")
            assert conv.run() is Status.PAUSED
            assert len(server.requests) == 2
            reason = conv.status_reason or ""
            assert reason.startswith("budget reached: max_cost_usd $0.000010 (used $0.0000")
            info = store.get_conversation(conv.id)
            assert info.cost_usd >= 0.00001
            pause = conv.active_path()[-1]
            assert (pause.kind, pause.source) == ("pause", "environment")
            # Running again without a raise asks nothing of the model.
            assert conv.run() is Status.PAUSED
            assert len(server.requests) == 2
            with pytest.raises(BudgetLowered, match="max_cost_usd can only be raised"):
                conv.raise_budget(Budget(max_cost_usd=0.000001))
            changes = conv.raise_budget(Budget(max_cost_usd=1.0))
            assert changes == {"max_cost_usd": {"from": 0.00001, "to": 1.0}}
            assert conv.run() is Status.FINISHED
            assert len(server.requests) == 5
    stored = ConversationSettings.from_metadata(store.get_conversation(conv.id).metadata)
    assert stored is not None
    assert stored.max_cost_usd == 1.0
    facts = [
        item.event
        for item in store.get_range(conv.id, 0, 10**6)
        if item.event.kind == "state_change" and item.event.key == BUDGET_KEY
    ]
    assert [fact.value for fact in facts] == [changes]  # type: ignore[union-attr]
    store.close()


def test_a_summary_call_counts_and_can_reach_the_budget(tmp_path: Path) -> None:
    """The condenser's summary call is a model call: its tokens count, and a budget it
    reaches stops the run before the response it was made for is asked."""
    store = open_store(f"sqlite:///{tmp_path / 'summary.db'}")
    settings = ConversationSettings.scripted_inline(
        think_steps(40), tmp_path / "ws", context_tokens=1200
    )
    with Conversation.create(store, settings) as conv:
        conv.send_message("think")
        assert conv.run(max_steps=100) is Status.FINISHED
        path = conv.active_path()
    condensations = [e for e in path if e.kind == "condensation"]
    assert condensations
    first = path.index(condensations[0])
    # The budget is the tokens spent just before the first summary call, plus one.
    spent_before = sum(
        e.usage.prompt_tokens + e.usage.completion_tokens  # type: ignore[union-attr]
        for e in path[:first]
        if e.kind == "action"
    )
    budgeted = ConversationSettings.scripted_inline(
        think_steps(40), tmp_path / "ws", context_tokens=1200, max_total_tokens=spent_before + 1
    )
    with Conversation.create(store, budgeted) as conv:
        conv.send_message("think")
        assert conv.run(max_steps=100) is Status.PAUSED
        again = conv.active_path()
        assert [e.kind for e in again[-2:]] == ["condensation", "pause"]
        assert (conv.status_reason or "").startswith(
            f"budget reached: max_total_tokens {spent_before + 1:,} (used "
        )
        conv.raise_budget(Budget(max_total_tokens=10**9))
        assert conv.run(max_steps=100) is Status.FINISHED
    store.close()
