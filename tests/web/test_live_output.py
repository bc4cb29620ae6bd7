"""The Canvas shows a running command's output in its call's card as it comes (the stream's
transient frames), then the stored result in its place."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from treadle.client import TreadleClient
from treadle.runtime.settings import ConversationSettings


def test_a_running_calls_card_fills_then_shows_its_result(
    page: Page, web_client: TreadleClient, web_folder: Path
) -> None:
    workspace = web_folder / "live-output"
    workspace.mkdir(exist_ok=True)
    command = "echo live-$((20+22)); sleep 3; echo done-$((1+1))"
    responses = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
    ]
    settings = ConversationSettings.scripted_inline(responses, workspace)
    conversation = web_client.create_conversation(settings, title="Live output")
    conversation.send_message("print, wait, print")
    open_conversation(page, web_client.api.base_url, conversation.id)
    conversation.run(wait=False)

    card = page.locator(".item-response .call", has=page.locator(".tool", has_text="terminal"))
    live = card.locator(".result-live .output")
    expect(live).to_have_text("live-42\n", timeout=5_000)  # before the command ends
    expect(card).to_have_class(re.compile(r"\bstate-running\b"))
    expect(page.locator(".conversation")).to_have_attribute("data-status", "running")
    assert "done-2" not in live.inner_text()
    screenshot(page, "live-output-running")

    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")
    expect(card.locator(".result-live")).to_have_count(0)  # the stored result took its place
    expect(card.locator(".result .output")).to_contain_text("live-42")
    expect(card.locator(".result .output")).to_contain_text("done-2")
    screenshot(page, "live-output-done")
