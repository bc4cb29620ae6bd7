"""Real OpenHands SDK trajectories, imported: a condensation's forgotten events collapse into
one span (opened on demand) beside the condensation card; agent errors, rejections, a pause
and a call still waiting for its result each look like what they are."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.openhands_folders import CONVERSATIONS
from support.server_process import ServerProcess
from treadle.events.model import ROOT, MessageEvent
from treadle.store.openhands import import_conversation
from treadle.store.urls import open_store


@pytest.fixture(scope="module")
def imported(web_server: ServerProcess) -> dict[str, str]:
    store = open_store(web_server.store_url)
    try:
        ids = {
            name: import_conversation(store, CONVERSATIONS[name]).conversation_id
            for name in ("condensation", "agent_errors", "confirmation")
        }
    finally:
        store.close()
    return ids


def test_condensation_is_a_collapsed_span(
    page: Page, web_server: ServerProcess, imported: dict[str, str]
) -> None:
    open_conversation(page, web_server.base_url, imported["condensation"])
    expect(page.locator(".conversation-head .title")).to_have_text("Imported: condensation")
    span = page.locator(".item-condensed")
    expect(span).to_have_count(1)
    expect(span).not_to_have_attribute("open", "")
    expect(span.locator(".item")).to_have_count(0)  # built only when opened
    expect(page.locator(".item-condensation .meta")).to_have_text("8 events forgotten")
    span.locator("summary").click()
    expect(span.locator(".item-response")).to_have_count(4)
    system = page.locator(".item-system")
    system.locator("summary").click()
    # The window re-renders whenever the audit, status or selection changes, often right after
    # a click (the audit answering after it once closed the span under the reader).
    page.evaluate("window.treadle.screen.transcript.refresh()")
    expect(span).to_have_attribute("open", "")
    expect(span.locator(".item-response")).to_have_count(4)
    expect(system).to_have_attribute("open", "")
    screenshot(page, "condensation")


def test_errors_rejections_pause_and_pending_are_styled(
    page: Page, web_server: ServerProcess, imported: dict[str, str]
) -> None:
    open_conversation(page, web_server.base_url, imported["agent_errors"])
    expect(page.locator(".call.state-error").first).to_be_visible()
    expect(page.locator(".result-agent_error .label").first).to_have_text("Agent error")
    expect(page.locator(".call.state-done", has_text="echo recovered")).to_have_count(1)

    open_conversation(page, web_server.base_url, imported["confirmation"])
    rejected = page.locator(".call.state-rejected")
    expect(rejected.locator(".reason")).to_have_text("Too risky: do not delete anything.")
    expect(page.locator(".item-pause")).to_have_count(1)
    expect(page.locator(".call.state-pending .result-pending")).to_have_text("No result yet.")
    screenshot(page, "rejection-pause-pending")


def test_a_long_text_shown_in_full_stays_so_when_the_transcript_re_renders(
    page: Page, web_server: ServerProcess
) -> None:
    text = "0123456789" * 3_000  # past the Canvas's 20,000 characters shown at first
    store = open_store(web_server.store_url)
    try:
        conversation = store.create_conversation(title="a long message").id
        store.append(conversation, MessageEvent(id="m0", source="user", text=text, parent_id=ROOT))
    finally:
        store.close()
    open_conversation(page, web_server.base_url, conversation)
    message = page.locator(".item-message .long")
    more = message.locator("button.more")
    expect(more).to_have_text("Show all 30,000 characters")
    more.click()
    expect(more).to_have_count(0)
    page.evaluate("window.treadle.screen.transcript.refresh()")
    expect(page.locator(".item-message .long")).to_have_class(re.compile("shown-all"))
    expect(page.locator(".item-message .long button.more")).to_have_count(0)
    shown = page.locator(".item-message .long .text").text_content()
    assert shown == text
