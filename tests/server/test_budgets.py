"""Budgets through the agent server: settings take them, a run a budget paused says so in the
conversation's view with its usage totals, ``PATCH /budget`` raises (never lowers) and a run
then finishes."""

from __future__ import annotations

import httpx
import pytest

from support.scripts import think_steps
from treadle.client import RemoteError
from treadle.runtime.status import ConversationStatus as Status


def test_a_budget_pauses_a_server_run_and_a_raise_continues(client, server, settings_for):
    settings = settings_for(think_steps(8), max_total_tokens=1500)
    conversation = client.create_conversation(settings)
    assert conversation.info().metadata["settings"]["max_total_tokens"] == 1500
    conversation.send_message("think")
    assert conversation.run() is Status.PAUSED
    view = conversation.info()
    assert view.status_reason is not None
    assert view.status_reason.startswith("budget reached: max_total_tokens 1,500 (used ")
    assert view.prompt_tokens + view.completion_tokens >= 1500
    assert view.completion_tokens > 0
    listed = client.list_conversations().items[0]
    assert (listed.prompt_tokens, listed.cost_usd) == (view.prompt_tokens, view.cost_usd)
    with pytest.raises(RemoteError) as lowered:
        conversation.raise_budget(max_total_tokens=100)
    assert lowered.value.status == 422
    assert lowered.value.code == "budget_lowered"
    raised = conversation.raise_budget(max_total_tokens=1_000_000)
    assert raised.metadata["settings"]["max_total_tokens"] == 1_000_000
    assert conversation.run() is Status.FINISHED
    done = conversation.info()
    assert done.prompt_tokens > view.prompt_tokens


def test_budget_fields_are_checked(server, settings_for):
    settings = settings_for(think_steps(1)).model_dump(mode="json")
    settings["max_cost_usd"] = -1
    with httpx.Client(base_url=server.base_url) as http:
        bad = http.post("/api/conversations", json={"settings": settings})
        assert bad.status_code == 422
        assert "max_cost_usd" in bad.text
        good = dict(settings, max_cost_usd=0.5)
        created = http.post("/api/conversations", json={"settings": good})
        assert created.status_code == 201
        path = f"/api/conversations/{created.json()['id']}/budget"
        empty = http.patch(path, json={})
        assert empty.status_code == 422
        assert "max_cost_usd or max_total_tokens" in empty.text
        assert (
            http.patch(path, json={"max_cost_usd": 2.5}).json()["metadata"]["settings"][
                "max_cost_usd"
            ]
            == 2.5
        )
