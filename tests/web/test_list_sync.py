"""The sidebar list agrees with the open conversation's header: the list entry follows the
stream's frames (status, event count), never left behind at its last refresh."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.runtime.settings import ConversationSettings

STEPS = [
    {"tool_calls": [{"name": "think", "arguments": {"thought": f"step {i}"}}]} for i in range(3)
] + [{"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}]


def test_the_list_entry_says_what_the_header_says(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline(STEPS, web_folder)
    conversation = web_client.create_conversation(settings, title="In sync")
    open_conversation(page, web_server.base_url, conversation.id)
    entry = page.locator(f"#conversation-list li[data-conversation-id='{conversation.id}']")
    expect(entry).to_be_visible()
    # From now on the list cannot be refetched: what it shows must come from the stream.
    page.route("**/api/conversations?limit=*", lambda route: route.abort())
    # Run from outside the page: only the stream tells the page, well before the list's
    # periodic refresh.
    conversation.send_message("go")
    assert conversation.run().value == "finished"
    count = conversation.count()
    header = page.locator(".conversation-head")
    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")
    expect(header.locator(".count")).to_have_text(f"{count} events")
    expect(entry.locator(".status")).to_have_text("finished")
    expect(entry.locator(".events")).to_have_text(f"{count} ev.")
