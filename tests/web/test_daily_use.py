"""The Canvas as people use it every day: Run, Pause and Interrupt follow the state the server
says the status offers; the toolbar stays on screen from 800 px to wide screens with the side
panel open; a file the agent writes shows as a diff; the New dialog takes the first task; a
server that is down is said in plain words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from support.canvas import open_conversation, screenshot
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.settings import ConversationSettings

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def control(page: Page, name: str):
    return page.locator(f".conversation-head button[data-control={name}]")


def test_run_pause_and_interrupt_follow_the_state(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    responses = [
        {"tool_calls": [{"id": "c1", "name": "terminal", "arguments": {"command": "echo hi"}}]},
        FINISH,
    ]
    settings = ConversationSettings.scripted_inline(
        responses, web_folder, confirmation=ConfirmationPolicy.ALWAYS
    )
    conversation = web_client.create_conversation(settings, title="Controls")
    open_conversation(page, web_server.base_url, conversation.id)
    # idle: only Run
    expect(control(page, "run")).to_be_enabled()
    expect(control(page, "pause")).to_be_disabled()
    expect(control(page, "interrupt")).to_be_disabled()

    page.fill(".composer textarea", "say hi")
    page.keyboard.press("Control+Enter")
    head = page.locator(".conversation")
    expect(head).to_have_attribute("data-status", "waiting_for_confirmation")
    # waiting: decide (or pause); running it again is not what the user wants here
    expect(control(page, "run")).to_be_disabled()
    expect(control(page, "pause")).to_be_enabled()
    page.locator("[data-call-id=c1] button.confirm").click()
    expect(head).to_have_attribute("data-status", "idle")  # decided: Run goes on
    expect(control(page, "run")).to_be_enabled()
    control(page, "run").click()
    expect(head).to_have_attribute("data-status", "waiting_for_confirmation")  # the finish call
    page.locator(".pending-bar button.confirm").click()
    expect(head).to_have_attribute("data-status", "finished")
    # finished: Run would ask the model with nothing new (it was turned into an error)
    expect(control(page, "run")).to_be_disabled()
    expect(control(page, "run")).to_have_attribute(
        "title", "Nothing to run: send a message (Send & run) to continue"
    )
    expect(control(page, "pause")).to_be_disabled()
    expect(control(page, "interrupt")).to_be_disabled()
    screenshot(page, "controls-finished")
    info = conversation.info()
    assert info.status == "finished"
    assert info.controls == []  # the server says so: the page only mirrors it


@pytest.mark.parametrize("width", [800, 1366, 1920])
def test_the_toolbar_stays_on_screen_with_the_panel_open(
    browser: Browser,
    web_server: ServerProcess,
    web_client: TreadleClient,
    web_folder: Path,
    width: int,
) -> None:
    settings = ConversationSettings.scripted_inline([], web_folder)
    conversation = web_client.create_conversation(
        settings, title="A conversation whose title is rather long, as titles often are"
    )
    context = browser.new_context(viewport={"width": width, "height": 720})
    try:
        page = context.new_page()
        open_conversation(page, web_server.base_url, conversation.id)
        page.get_by_role("button", name="Branches", exact=True).click()
        expect(page.locator("#panel")).to_be_visible()
        names = ["Run", "Pause", "Interrupt", "Branches", "Search"]
        for name, box in toolbar_layout(page, names).items():
            assert box["x"] >= 0, (name, box)
            assert box["right"] <= width, (name, box, width)  # never off-screen
            if width > 960:  # wide: the open panel lies over none of them
                assert box["hit"] == name, (name, box, width)
        screenshot(page, f"layout-{width}")
        if width <= 960:
            # narrow: the panel lies over the transcript's right edge; Escape puts it away
            page.keyboard.press("Escape")
            expect(page.locator("#panel")).to_be_hidden()
            for name, box in toolbar_layout(page, names).items():
                assert box["hit"] == name, (name, box, width)
    finally:
        context.close()


def test_a_file_the_agent_creates_or_edits_shows_as_a_diff(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    workspace = web_folder / "diff-workspace"
    workspace.mkdir(exist_ok=True)
    edit = lambda **arguments: {  # noqa: E731
        "tool_calls": [{"name": "file_editor", "arguments": arguments}]
    }
    responses = [
        edit(command="create", path="hello.py", file_text="def hello():\n    return 'hi'\n"),
        edit(command="str_replace", path="hello.py", old_str="'hi'", new_str="'hello'"),
        FINISH,
    ]
    settings = ConversationSettings.scripted_inline(responses, workspace)
    conversation = web_client.create_conversation(settings, title="Diffs")
    conversation.send_message("write hello")
    conversation.run()
    open_conversation(page, web_server.base_url, conversation.id)
    calls = page.locator(".call .file-edit")
    expect(calls).to_have_count(2)
    created = calls.nth(0)
    expect(created.locator(".diff-add")).to_have_text(["+def hello():\n", "+    return 'hi'\n"])
    expect(created.locator(".diff-hunk")).to_have_text("@@ new file, 2 lines @@\n")
    edited = calls.nth(1)
    expect(edited.locator(".diff-del")).to_have_text(["-'hi'\n"])
    expect(edited.locator(".diff-add")).to_have_text(["+'hello'\n"])
    # the JSON stays one click away, and shows the newline as a newline, never as "\n" text
    expect(created.locator("details.fold pre.args")).to_be_hidden()
    assert "\\n" not in created.locator(".diff").inner_text()
    screenshot(page, "file-edit-diff")


def test_the_new_dialog_takes_the_first_task_and_runs_it(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    page.goto(web_server.base_url)
    page.get_by_role("button", name="New", exact=True).click()
    form = page.locator("#create-form")
    form.locator("textarea[name=task]").fill("Say hello")
    form.locator("input[name=workspace]").fill(str(web_folder))
    form.locator("select[name=model_kind]").select_option("scripted")
    form.locator("textarea[name=responses]").fill(json.dumps([{"text": "Hello!"}]))
    form.get_by_role("button", name="Create").click()
    expect(page.locator(".item-message.from-user .text")).to_have_text("Say hello")
    expect(page.locator(".item-message.from-agent .text")).to_have_text("Hello!")
    expect(page.locator(".conversation")).to_have_attribute("data-status", "finished")
    screenshot(page, "new-with-task")


def test_a_server_that_is_down_is_said_in_plain_words(browser: Browser, web_folder: Path) -> None:
    server = ServerProcess(f"sqlite:///{web_folder / 'down.db'}", log_dir=web_folder).start()
    context = browser.new_context(viewport={"width": 1366, "height": 820})
    try:
        page = context.new_page()
        page.goto(server.base_url)
        expect(page.locator("#list-note")).to_have_text("No conversation yet: create one.")
        server.stop()
        page.get_by_role("button", name="New", exact=True).click()
        form = page.locator("#create-form")
        form.locator("input[name=workspace]").fill(str(web_folder))
        form.get_by_role("button", name="Create").click()
        message = page.locator("#create-error")
        expect(message).to_contain_text("does not answer: is `treadle serve` still running?")
        expect(message).not_to_have_text("Failed to fetch")
        screenshot(page, "server-down")
    finally:
        context.close()
        server.stop()


def toolbar_layout(page: Page, names: list[str]) -> dict[str, dict[str, object]]:
    """Each toolbar button's left and right edge and what lies at its middle, read in one go
    (a status arriving between two reads may move the buttons: the layout is judged whole)."""
    layout: dict[str, dict[str, object]] = page.evaluate(
        """(names) => Object.fromEntries(names.map((name) => {
            const button = [...document.querySelectorAll(".conversation-head button")]
                .find((b) => b.textContent.trim() === name);
            if (!button) return [name, null];
            const r = button.getBoundingClientRect();
            const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
            return [name, {x: r.x, right: r.x + r.width, hit: hit?.textContent}];
        }))""",
        names,
    )
    missing = [name for name, box in layout.items() if box is None]
    assert not missing, f"no toolbar button named {missing}"
    return layout
