"""Workspace snapshots in the Canvas, in a real Chromium: the Files view of a response shows the
diff its calls made, and "Continue from here" with "Restore files" ticked puts the files back."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.runtime.settings import ConversationSettings


def editor(arguments: dict) -> dict:
    return {"tool_calls": [{"name": "file_editor", "arguments": arguments}]}


def test_files_view_and_continue_with_restore(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    workspace = web_folder / "snapshots-ws"
    settings = ConversationSettings.scripted_inline(
        [
            editor({"command": "create", "path": "code.py", "file_text": "def foo():\n"}),
            editor(
                {
                    "command": "str_replace",
                    "path": "code.py",
                    "old_str": "def foo",
                    "new_str": "def bar",
                }
            ),
            {"text": "done"},
        ],
        workspace,
    )
    conversation = web_client.create_conversation(settings, title="Snapshots")
    conversation.send_message("write foo, then rename it")
    conversation.run()
    assert (workspace / "code.py").read_text() == "def bar():\n"
    path = conversation.active_path()
    rename = [e for e in path if e.kind == "action"][1]
    created = next(e for e in path if e.kind == "observation")

    open_conversation(page, web_server.base_url, conversation.id)
    page.locator(f"[data-event-id='{rename.id}'] .call-head").first.click()
    panel = page.locator("#panel-body")
    expect(panel.locator(".files .note")).to_contain_text("1 file(s) changed: code.py")
    expect(panel.locator(".diff .diff-del")).to_contain_text(["-def foo():"])
    expect(panel.locator(".diff .diff-add")).to_contain_text(["+def bar():"])
    screenshot(page, "snapshots-files")

    page.locator(f"[data-event-id='{created.id}'] .result-head").first.click()
    choice = panel.locator("label.restore-files input")
    expect(choice).to_be_checked()  # a snapshot covers the file's creation
    expect(panel.locator("label.restore-files")).to_contain_text("snapshot")
    panel.get_by_role("button", name="Continue from here").click()
    expect(page.locator(".toast").last).to_contain_text("restored the files: 1 changed")
    assert (workspace / "code.py").read_text() == "def foo():\n"
    assert conversation.head == created.id
