"""The Canvas says what the last run's tools ran under, in a small line under the header: live
when a run starts, after a reload from the API's view, and as a warning for a run without a
sandbox (here recorded as another process on the same store would, e.g. `treadle run
--conversation ID --sandbox none`)."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.data.isolation import ISOLATION_KEY
from treadle.events.model import StateChangeEvent
from treadle.runtime.settings import ConversationSettings
from treadle.store.urls import open_store

ECHO = {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo hi"}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
UNSANDBOXED = {
    "sandbox": "none",
    "network": "on",
    "mounts_ro": [],
    "limits": {"memory_mib": None, "processes": None, "file_size_mib": None, "cpu_seconds": None},
    "override": "chosen for this run by the user",
}


def test_the_isolation_line_follows_the_runs(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline([ECHO, FINISH], web_folder / "isolated")
    conversation = web_client.create_conversation(settings, title="Sandboxed")
    open_conversation(page, web_server.base_url, conversation.id)
    line = page.locator(".conversation .isolation-line")
    expect(line).to_be_hidden()  # no run yet: nothing recorded
    page.fill(".composer textarea", "go")
    page.keyboard.press("Control+Enter")
    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")
    expect(line).to_be_visible()
    expect(line).to_have_text("Sandbox: bubblewrap, network off")
    expect(line).to_have_attribute("data-sandbox", "bubblewrap")
    assert "processes 256" in (line.get_attribute("title") or "")
    screenshot(page, "isolation-sandboxed")

    page.reload()
    page.wait_for_selector("body[data-interactive='true']")
    expect(line).to_have_text("Sandbox: bubblewrap, network off")

    store = open_store(web_server.store_url)
    try:
        fact = StateChangeEvent(
            key=ISOLATION_KEY, value=UNSANDBOXED, parent_id=store.head(conversation.id)
        )
        store.append(conversation.id, fact, move_head=False)
    finally:
        store.close()
    expect(line).to_have_attribute("data-sandbox", "none")
    expect(line).to_contain_text("No sandbox")
    expect(line).to_have_class("isolation-line isolation-none")
    screenshot(page, "isolation-none")
