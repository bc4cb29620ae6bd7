"""The header's usage figure in the Canvas is the server's: during a run each event frame's
totals (docs/stream.md, ``usage``), on load the conversation's view; after a run with usage it
says the store's totals, live and after a reload (real server, real Chromium)."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.scripts import think_steps
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.runtime.settings import ConversationSettings


def _figure(prompt_tokens: int, completion_tokens: int, cost_usd: float) -> str:
    return f"{prompt_tokens + completion_tokens:,} tokens · ${cost_usd:.4f}"


def test_the_headers_usage_is_the_stores_totals_live_and_after_a_reload(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline(
        think_steps(6), web_folder / "usage-ws", tools=("think", "finish")
    )
    conversation = web_client.create_conversation(settings, title="usage in the header")
    conversation.send_message("think")
    open_conversation(page, web_server.base_url, conversation.id)
    usage = page.locator(".conversation-head .usage")
    expect(usage).to_have_text(_figure(0, 0, 0.0))
    # The list's refreshes (which bring the totals too) are held back: only frames can tell.
    held = re.compile(r"/api/conversations(\?.*)?$")
    page.route(held, lambda route: route.abort())
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")
    totals = conversation.info()
    assert totals.prompt_tokens > 0
    assert totals.completion_tokens > 0
    # Live: the last frame's totals, which are the store's.
    expect(usage).to_have_text(
        _figure(totals.prompt_tokens, totals.completion_tokens, totals.cost_usd)
    )
    screenshot(page, "usage-header")
    page.unroute(held)
    page.reload()
    page.wait_for_selector("body[data-interactive='true']")
    expect(usage).to_have_text(
        _figure(totals.prompt_tokens, totals.completion_tokens, totals.cost_usd)
    )
