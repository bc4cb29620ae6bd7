"""Steering from the page: calls that wait for confirmation show their arguments; one is
confirmed from the keyboard, the other rejected with a reason; then the run goes on."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import TreadleClient
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.settings import ConversationSettings


def test_confirm_one_call_and_reject_another(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    responses = [
        {
            "text": "Two commands; you decide.",
            "tool_calls": [
                {"id": "c-keep", "name": "terminal", "arguments": {"command": "echo kept"}},
                {"id": "c-drop", "name": "terminal", "arguments": {"command": "rm -rf /nope"}},
            ],
        },
        {"text": "Understood: one ran, one was refused."},
    ]
    settings = ConversationSettings.scripted_inline(
        responses, web_folder, confirmation=ConfirmationPolicy.ALWAYS
    )
    conversation = web_client.create_conversation(settings, title="Confirmation")
    open_conversation(page, web_server.base_url, conversation.id)
    page.fill(".composer textarea", "Clean up")
    page.keyboard.press("Control+Enter")

    conversation_view = page.locator(".conversation")
    expect(conversation_view).to_have_attribute("data-status", "waiting_for_confirmation")
    keep = page.locator("[data-call-id=c-keep]")
    drop = page.locator("[data-call-id=c-drop]")
    expect(page.locator(".call.state-waiting")).to_have_count(2)
    expect(drop.locator(".args")).to_contain_text("rm -rf /nope")  # what would run is shown
    expect(page.locator(".pending-bar")).to_contain_text("2 calls wait")
    expect(keep).to_have_class(re.compile(r"\bselected\b"))  # the keyboard's first target
    screenshot(page, "confirmation-waiting")

    page.locator(".transcript").focus()
    page.keyboard.press("y")  # confirm the selected call
    expect(keep).to_have_class(re.compile(r"\bstate-done\b"))
    expect(keep.locator(".output")).to_contain_text("kept")
    expect(conversation_view).to_have_attribute("data-status", "waiting_for_confirmation")
    expect(page.locator(".pending-bar")).to_contain_text("1 call waits")

    page.fill(".pending-bar input", "not on my machine")
    drop.locator("button.reject").click()
    expect(drop).to_have_class(re.compile(r"\bstate-rejected\b"))
    expect(drop.locator(".result-user_rejection")).to_contain_text("not on my machine")
    expect(page.locator(".pending-bar")).to_be_hidden()
    expect(conversation_view).to_have_attribute("data-status", "idle")
    screenshot(page, "confirmation-decided")

    page.get_by_role("button", name="Run", exact=True).click()
    expect(conversation_view).to_have_attribute("data-status", "finished")
    expect(page.locator(".item-message.from-agent")).to_contain_text("one was refused")


def test_pause_stops_a_run_between_steps(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    steps = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": f"sleep 0.3; echo {i}"}}]}
        for i in range(30)
    ]
    settings = ConversationSettings.scripted_inline(steps, web_folder)
    conversation = web_client.create_conversation(settings, title="Pause")
    open_conversation(page, web_server.base_url, conversation.id)
    page.fill(".composer textarea", "Count slowly")
    page.get_by_role("button", name="Send & run").click()
    expect(page.locator(".call.state-done").first).to_be_visible()
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator(".conversation")).to_have_attribute("data-status", "paused")
    expect(page.locator(".item-pause")).to_have_count(1)
    assert page.locator(".item-response").count() < len(steps)


def test_interrupt_stops_the_running_command_now(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    marker = web_folder / "interrupt-started"
    command = f"touch {marker}; sleep 60; touch {web_folder / 'interrupt-ran-on'}"
    steps = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]},
        {"text": "Understood: you stopped it."},
    ]
    settings = ConversationSettings.scripted_inline(steps, web_folder)
    conversation = web_client.create_conversation(settings, title="Interrupt")
    open_conversation(page, web_server.base_url, conversation.id)
    page.fill(".composer textarea", "Wait a minute")
    page.get_by_role("button", name="Send & run").click()
    expect(page.locator(".call.state-running")).to_be_visible()
    wait_until(marker.exists)

    page.get_by_role("button", name="Interrupt", exact=True).click()
    # Well before the 60 s command could end: it was killed.
    expect(page.locator(".conversation")).to_have_attribute("data-status", "paused", timeout=5_000)
    result = page.locator(".result-agent_error.is-interrupted")
    expect(result).to_contain_text("Interrupted by the user")
    expect(result).to_contain_text("interrupted by the user")
    expect(page.locator(".status-reason")).to_contain_text("interrupted by the user")
    screenshot(page, "interrupted")
    assert not (web_folder / "interrupt-ran-on").exists()

    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")
    expect(page.locator(".item-message.from-agent")).to_contain_text("you stopped it")
    assert conversation.audit().violations == []
