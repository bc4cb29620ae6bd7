"""A conversation the runtime condensed, in the Canvas: each condensation card says why it was
made and what its summary call cost, and the events it forgot are still there, folded into a
span that opens on demand."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from support.canvas import open_conversation
from support.scripts import think_steps
from support.server_process import ServerProcess
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus
from treadle.store.urls import open_store


@pytest.fixture(scope="module")
def condensed(web_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> str:
    workspace = Path(tmp_path_factory.mktemp("condensed-ws"))
    settings = ConversationSettings.scripted_inline(
        think_steps(40), workspace, tools=("think", "finish"), context_tokens=700
    )
    store = open_store(web_server.store_url)
    try:
        with Conversation.create(store, settings, title="condensed run") as conversation:
            conversation.send_message("think it through")
            assert conversation.run(max_steps=50) is ConversationStatus.FINISHED
            return conversation.id
    finally:
        store.close()


def test_a_runtime_condensation_shows_why_and_its_cost(
    page: Page, web_server: ServerProcess, condensed: str
) -> None:
    open_conversation(page, web_server.base_url, condensed)
    cards = page.locator(".item-condensation")
    expect(cards.first).to_be_visible()
    first = cards.first
    first.locator("summary").first.click()
    expect(first).to_contain_text("over the budget of 700")
    expect(first).to_contain_text("Summary call:")
    expect(first).to_contain_text("Summary of the earlier steps (scripted model)")
    spans = page.locator(".item-condensed")
    expect(spans.first).to_be_visible()
    spans.first.locator("summary").click()
    expect(spans.first.locator(".item-response").first).to_be_visible()
