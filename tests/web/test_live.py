"""Create a conversation from the page, send a message, and watch a response's parallel calls
and their results arrive live; results placed by call id whatever their order; a dropped
stream resumes by seq without a gap or a duplicate."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.events.model import ROOT, ActionEvent, MessageEvent, ObservationEvent
from treadle.runtime.settings import ConversationSettings
from treadle.store.urls import open_store


def test_create_send_and_watch_parallel_calls(
    page: Page, web_server: ServerProcess, web_folder: Path
) -> None:
    workspace = web_folder / "workspace"
    workspace.mkdir(exist_ok=True)
    responses = [
        {
            "text": "Three commands at once.",
            "tool_calls": [
                {"name": "terminal", "arguments": {"command": "echo one"}},
                {"name": "terminal", "arguments": {"command": "sleep 1.5; echo two"}},
                {"name": "terminal", "arguments": {"command": "echo three"}},
            ],
        },
        {"text": "All three ran."},
    ]
    page.goto(web_server.base_url + "/")
    expect(page.locator("#welcome")).to_be_visible()
    screenshot(page, "welcome")
    page.click("#new-conversation")
    form = page.locator("#create-form")
    form.locator("input[name=title]").fill("Parallel calls")
    form.locator("input[name=workspace]").fill(str(workspace))
    form.locator("select[name=model_kind]").select_option("scripted")
    form.locator("textarea[name=responses]").fill(json.dumps(responses))
    screenshot(page, "create-dialog")
    form.locator("button[type=submit]").click()
    page.wait_for_selector("body[data-interactive='true']")
    expect(page.locator("#conversation-list li.active")).to_contain_text("Parallel calls")

    # Live frames carry their transcript updates: the page fetches the transcript no more.
    fetched: list[str] = []
    page.on("request", lambda request: _note_transcript(fetched, request.url))
    page.fill(".composer textarea", "Run three commands")
    page.click("text=Send & run")
    calls = page.locator(".item-response .call")
    expect(calls).to_have_count(3)
    # Live: the first result is in while the second call still runs.
    expect(calls.nth(0)).to_have_class(re_class("state-done"))
    expect(calls.nth(1)).to_have_class(re_class("state-running"))
    screenshot(page, "parallel-calls-running")
    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")
    expect(page.locator(".item-response")).to_have_count(1)  # one card for the response
    for index, word in enumerate(["one", "two", "three"]):
        call = calls.nth(index)
        expect(call).to_have_class(re_class("state-done"))
        expect(call.locator(".result .output")).to_contain_text(word)
    expect(page.locator(".item-message.from-agent")).to_contain_text("All three ran.")
    screenshot(page, "parallel-calls-done")
    assert fetched == []


def test_results_in_any_order_and_a_dropped_stream(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline([], web_folder)
    conversation = web_client.create_conversation(settings, title="Out of order")
    store = open_store(web_server.store_url)
    try:
        question = MessageEvent(source="user", text="look at x and y", parent_id=ROOT)
        x = action("cx", question.id)
        y = action("cy", x.id)
        for event in (question, x, y):
            store.append(conversation.id, event)
        open_conversation(page, web_server.base_url, conversation.id)
        calls = page.locator(".item-response .call")
        expect(calls).to_have_count(2)
        expect(page.locator(".call.state-pending")).to_have_count(2)

        store.append(conversation.id, result_of(y, "y's output", y.id))  # y answers first
        expect(page.locator("[data-call-id=cy]")).to_have_class(re_class("state-done"))
        expect(page.locator("[data-call-id=cy] .output")).to_have_text("y's output")
        expect(page.locator("[data-call-id=cx]")).to_have_class(re_class("state-pending"))
        screenshot(page, "result-out-of-order")

        page.evaluate("window.treadle.dropStream()")
        last = store.head(conversation.id)
        late = result_of(x, "x's output", last)
        store.append(conversation.id, late)  # while the page is disconnected
        store.append(conversation.id, MessageEvent(source="user", text="after", parent_id=late.id))
        expect(page.locator("[data-call-id=cx] .output")).to_have_text("x's output")
        expect(page.locator("#connection")).to_have_text("live")
        expect(page.locator(".item-message.from-user")).to_have_count(2)
        expect(page.locator(".result-observation")).to_have_count(2)  # none twice
        expect(page.locator(".item-response")).to_have_count(1)
    finally:
        store.close()


def action(call_id: str, parent: str) -> ActionEvent:
    return ActionEvent(
        llm_response_id="r",
        tool_call_id=call_id,
        tool_name="terminal",
        arguments={"command": f"echo {call_id}"},
        raw_arguments=f'{{"command": "echo {call_id}"}}',
        parent_id=parent,
    )


def result_of(call: ActionEvent, content: str, parent: str) -> ObservationEvent:
    return ObservationEvent(
        action_id=call.id,
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        content=content,
        parent_id=parent,
    )


def re_class(name: str) -> re.Pattern[str]:
    return re.compile(rf"(^|\s){name}(\s|$)")


def _note_transcript(fetched: list[str], url: str) -> None:
    if "/transcript" in url:
        fetched.append(url)
