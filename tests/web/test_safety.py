"""Model and tool text is shown as text, never run as HTML: a tool output, an agent message,
tool arguments and a title holding <script>, onerror or a look-alike confirm button are inert;
and a server that needs a key gets it from the user once per tab."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from support.canvas import open_conversation, screenshot
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.eval.results import EvalRecord, begin_eval, now_text
from treadle.runtime.settings import ConversationSettings
from treadle.store.eval_results import open_eval_results

IMG = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>window.__pwned=2</script>"
FAKE_BUTTON = '<button class="confirm" onclick="window.__pwned=3">Confirm (y)</button>'
PAYLOAD = IMG + SCRIPT + FAKE_BUTTON


def test_injected_html_in_tool_output_is_inert(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    (web_folder / "payload.txt").write_text(PAYLOAD)
    responses = [
        {
            "text": f"Reading it. {SCRIPT}",
            "tool_calls": [
                {"name": "terminal", "arguments": {"command": "cat payload.txt"}},
                {"name": "think", "arguments": {"thought": IMG}},
            ],
        },
        {"text": f"The file says {PAYLOAD}"},
    ]
    settings = ConversationSettings.scripted_inline(responses, web_folder)
    conversation = web_client.create_conversation(settings, title=f"Title {IMG}")
    open_conversation(page, web_server.base_url, conversation.id)
    page.fill(".composer textarea", f"Show me {PAYLOAD}")
    page.keyboard.press("Control+Enter")
    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")

    output = page.locator(".call .result .output").first
    expect(output).to_contain_text(PAYLOAD)  # shown as the characters it is
    expect(page.locator(".item-message.from-agent .text")).to_have_text(f"The file says {PAYLOAD}")
    expect(page.locator(".conversation-head .title")).to_have_text(f"Title {IMG}")
    page.locator(".call .result-head").first.click()  # the raw JSON in the inspector too
    expect(page.locator(".raw-json")).to_contain_text("onerror")
    page.get_by_role("button", name="Search", exact=True).click()
    page.fill(".search-form input[type=search]", "pwned")
    page.locator(".search-form button[type=submit]").click()
    expect(page.locator(".results li").first).to_be_visible()
    screenshot(page, "injection-inert")

    injected = "img, script:not([src]), iframe, .transcript button[onclick], #panel [onclick]"
    assert page.locator(injected).count() == 0
    # Every confirm button on the page is one the Canvas made: none exists outside a call.
    assert page.locator("button.confirm:not(.decide button):not(.pending-bar button)").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    headers = page.request.get(web_server.base_url + "/").headers
    assert "script-src 'self'" in headers["content-security-policy"]


@pytest.fixture
def keyed_server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(
        f"sqlite:///{tmp_path / 'keyed.db'}", api_keys=("s3cret",), log_dir=tmp_path
    ).start()
    yield process
    process.stop()


def test_the_page_asks_for_the_key_and_keeps_it_for_the_tab(
    browser: Browser, keyed_server: ServerProcess, tmp_path: Path
) -> None:
    with TreadleClient(keyed_server.base_url, api_key="s3cret") as client:
        settings = ConversationSettings.scripted_inline([], tmp_path)
        conversation = client.create_conversation(settings, title="Behind a key")
        context = browser.new_context(viewport={"width": 1366, "height": 820})
        try:
            page = context.new_page()
            page.goto(f"{keyed_server.base_url}/#/c/{conversation.id}")
            dialog = page.locator("#key-dialog")
            expect(dialog).to_be_visible()
            page.fill("#key-input", "wrong")
            page.click("#key-form button[type=submit]")
            expect(page.locator("#key-message")).to_contain_text("refused")
            screenshot(page, "api-key-dialog")
            page.fill("#key-input", "s3cret")
            page.click("#key-form button[type=submit]")
            page.wait_for_selector("body[data-interactive='true']")
            expect(page.locator("#conversation-list")).to_contain_text("Behind a key")
            expect(page.locator("#connection")).to_have_text("live")
            client.conversation(conversation.id).send_message("over the keyed stream")
            expect(page.locator(".item-message.from-user")).to_contain_text("over the keyed stream")

            page.reload()  # same tab: the key is kept, no dialog
            page.wait_for_selector("body[data-interactive='true']")
            expect(dialog).to_be_hidden()
            assert page.evaluate("localStorage.length") == 0  # never beyond the tab
        finally:
            context.close()


def test_injected_html_in_an_evals_results_is_inert(page: Page, web_server: ServerProcess) -> None:
    # What an eval stores comes from its task file (its path), the engine and the tasks' runs
    # (a reason quotes what a setup printed or what a model said): all shown as text.
    results = open_eval_results(web_server.store_url)
    try:
        stamp = now_text()
        record = EvalRecord(
            "eval-hostile", f"/tasks/{IMG}.jsonl", "0" * 64, {"model": {"kind": IMG}},
            {"name": SCRIPT, "address": IMG, "workers": FAKE_BUTTON}, ("t1",), stamp, stamp,
        )  # fmt: skip
        begin_eval(results, record)
        results.start_attempt("eval-hostile", "t1", 0, "c-hostile")
        results.finish(
            "eval-hostile", "t1",
            {"task_id": "t1", "status": "setup_failed", "passed": False, "patch": PAYLOAD,
             "verify": None, "conversation_id": None, "steps": 0, "tokens": 0, "cost_usd": 0.0,
             "seconds": 0.1, "model_seconds": 0.0, "reason": f"setup exited 1: {PAYLOAD}",
             "attempts": 1},
        )  # fmt: skip
    finally:
        results.close()
    page.goto(f"{web_server.base_url}/#/e/eval-hostile")
    expect(page.locator(".eval-screen .note").first).to_have_text(f"/tasks/{IMG}.jsonl")
    expect(page.locator(".eval-summary")).to_contain_text(
        f"{SCRIPT} ({IMG}, {FAKE_BUTTON} workers)"
    )
    row = page.locator(".eval-screen tbody tr[data-task-id='t1']")
    reason = row.locator("td.eval-reason")
    expect(reason).to_have_attribute("title", f"setup exited 1: {PAYLOAD}")
    expect(reason).to_have_text(f"setup exited 1: {PAYLOAD}")  # shown as text, not markup
    expect(page.locator("#eval-list li[data-eval-id='eval-hostile']")).to_be_visible()
    assert page.locator("img, script:not([src]), iframe, [onclick], [onerror]").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
