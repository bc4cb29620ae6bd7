"""An imported OpenHands trajectory whose observation names the wrong tool (LINK-ID): the page
marks the event, the audit tab lists the violation and the inspector says it again."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.openhands_folders import copy_conversation, event_files
from support.server_process import ServerProcess
from treadle.events.model import ROOT, ActionEvent, EventBase, MessageEvent
from treadle.store.openhands import import_conversation
from treadle.store.urls import open_store


def test_link_id_violation_is_marked(
    page: Page, web_server: ServerProcess, web_folder: Path
) -> None:
    folder = copy_conversation("parallel_calls", web_folder / "broken")
    observation = next(
        path
        for path in event_files(folder)
        if json.loads(path.read_text())["kind"] == "ObservationEvent"
    )
    data = json.loads(observation.read_text())
    data["tool_name"] = "not_the_tool_called"
    observation.write_text(json.dumps(data))
    store = open_store(web_server.store_url)
    try:
        result = import_conversation(store, folder)
    finally:
        store.close()
    assert not result.problems, result.problems

    open_conversation(page, web_server.base_url, result.conversation_id)
    marked = page.locator(f"[data-event-id='{data['id']}'] .violation")
    expect(marked).to_have_text("LINK-ID")
    audit = page.locator(".conversation-head button", has_text="Audit")
    expect(audit).to_have_text(re.compile(r"Audit: \d+ violations?"))
    screenshot(page, "audit-marked")

    audit.click()
    panel = page.locator("#panel-body")
    row = panel.locator(".violation-row", has=page.locator(".violation", has_text="LINK-ID"))
    expect(row.locator(".message")).to_contain_text("not_the_tool_called")
    screenshot(page, "audit-panel")
    row.locator(".event-links button", has_text=data["id"][:8]).click()
    expect(panel.locator(".facts")).to_be_visible()
    expect(panel.locator(".violation-row .violation")).to_have_text("LINK-ID")


def test_a_log_with_more_violations_than_listed_shows_the_totals(
    page: Page, web_server: ServerProcess
) -> None:
    """1,006 violations: the server lists the first 1,000, the Canvas counts them all and says
    which contracts the list leaves out of sight."""
    store = open_store(web_server.store_url)
    try:
        conversation = store.create_conversation(title="many violations").id
        parent = "m0"
        events: list[EventBase] = [
            MessageEvent(id=parent, source="user", text="go", parent_id=ROOT)
        ]
        for index in range(504):  # one call id on one path: each repeat is a LINK-UNIQUE
            action = ActionEvent(
                id=f"a{index}",
                parent_id=parent,
                llm_response_id=f"r{index}",
                tool_call_id="same",
                tool_name="terminal",
                arguments={},
                raw_arguments="{}",
            )
            events.append(action)
            parent = action.id
        store.append_batch(conversation, events)
    finally:
        store.close()

    open_conversation(page, web_server.base_url, conversation)
    audit = page.locator(".conversation-head button", has_text="Audit")
    expect(audit).to_have_text("Audit: 1006 violations")
    audit.click()
    panel = page.locator("#panel-body")
    expect(panel.locator("h3")).to_have_text("1,006 contract violations")
    expect(panel.locator(".truncated")).to_have_text(
        "The first 1,000 violations in log order are listed (LINK-ORPHAN: 503, LINK-UNIQUE: 503)."
    )
    expect(panel.locator(".violation-row")).to_have_count(1000)
