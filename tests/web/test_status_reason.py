"""Why a run stopped is on the page, not only in a tooltip: a failed run's cause (live, and
after a reload), a stuck status whose reason quotes hostile text (shown as text), a run whose
process died (interrupted); and a stream the server closes for good stops, saying why."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot, wait_until
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus, status_event
from treadle.store.urls import open_store

HOSTILE = '<img src=x onerror="window.__pwned=1"><b>bold</b>'


def record_status(
    server: ServerProcess, conversation_id: str, status: ConversationStatus, reason: str | None
) -> None:
    """Appends a status change as a process on the same store would (a run, a CLI run)."""
    store = open_store(server.store_url)
    try:
        store.append(conversation_id, status_event(status, store.head(conversation_id), reason))
    finally:
        store.close()


def test_a_failed_runs_cause_is_shown_live_and_after_a_reload(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    # A scripted model with no responses fails at the first model call: status ERROR.
    settings = ConversationSettings.scripted_inline([], web_folder)
    conversation = web_client.create_conversation(settings, title="Fails at once")
    open_conversation(page, web_server.base_url, conversation.id)
    reason = page.locator(".conversation .status-reason")
    expect(reason).to_be_hidden()  # idle: nothing to explain
    page.fill(".composer textarea", "go")
    page.keyboard.press("Control+Enter")
    expect(page.locator(".conversation")).to_have_attribute("data-status", "error")
    expect(reason).to_be_visible()
    expect(reason).to_contain_text("Failed: ")
    expect(reason).to_contain_text("the script has 0 responses and response 1 was asked for")
    screenshot(page, "failed-run-reason")

    page.reload()
    page.wait_for_selector("body[data-interactive='true']")
    expect(reason).to_be_visible()
    expect(reason).to_contain_text("the script has 0 responses")
    stored = web_client.conversation(conversation.id).info().status_reason
    assert reason.inner_text() == f"Failed: {stored}"


def test_a_hostile_reason_is_plain_text(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline([], web_folder)
    conversation = web_client.create_conversation(settings)
    open_conversation(page, web_server.base_url, conversation.id)
    record_status(web_server, conversation.id, ConversationStatus.STUCK, f"looping on {HOSTILE}")
    reason = page.locator(".conversation .status-reason")
    expect(page.locator(".conversation")).to_have_attribute("data-status", "stuck")
    expect(reason).to_have_text(f"Stuck: looping on {HOSTILE}")  # the characters, as they are
    assert reason.locator("img, b").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"

    record_status(web_server, conversation.id, ConversationStatus.PAUSED, "paused by the user")
    expect(reason).to_have_text("Paused: paused by the user")
    record_status(web_server, conversation.id, ConversationStatus.FINISHED, None)
    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")
    expect(reason).to_be_hidden()


def test_a_run_whose_process_died_shows_as_interrupted(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline([], web_folder)
    conversation = web_client.create_conversation(settings)
    # "running" in the log, but no process holds its run lease: it died mid-run.
    record_status(web_server, conversation.id, ConversationStatus.RUNNING, None)
    open_conversation(page, web_server.base_url, conversation.id)
    expect(page.locator(".conversation")).to_have_attribute("data-status", "running")
    reason = page.locator(".conversation .status-reason")
    expect(reason).to_be_visible()
    expect(reason).to_contain_text("Interrupted: interrupted: the process that ran it stopped")
    screenshot(page, "interrupted-run-reason")


def test_a_stream_closed_for_good_stops_and_says_why(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline([], web_folder)
    conversation = web_client.create_conversation(settings)
    open_conversation(page, web_server.base_url, conversation.id)

    # A stream asked for with a bad cursor is refused (4400): not retried, the reason kept.
    page.evaluate(
        """async (id) => {
          const { EventStream } = await import("/static/stream.js");
          window.__states = [];
          window.__stream = new EventStream(id, -5, {
            onMessage: () => {},
            onState: (state, detail) => window.__states.push([state, detail]),
          });
        }""",
        conversation.id,
    )
    wait_until(page, "window.__states.some(([state]) => state === 'stopped')")
    states = page.evaluate("window.__states")
    assert [state for state, _detail in states] == ["connecting", "live", "stopped"]
    assert states[-1][1]["code"] == 4400
    assert "after_seq must be an integer from -1" in states[-1][1]["reason"]
    assert page.evaluate("window.__stream.timer") == 0  # no reconnect was scheduled

    # The open conversation is deleted: the page's own stream ends (4404) and says so.
    conversation.delete()
    note = page.locator(".conversation .stream-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("no longer exists (no such conversation)")
    expect(page.locator("#connection")).to_have_text("gone")
