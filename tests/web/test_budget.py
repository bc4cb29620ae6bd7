"""A conversation a budget paused, in the Canvas: the header shows its tokens and cost beside
its budgets and the reason names the budget; once the budget is raised (API), Run continues and
the header follows the new totals and the raised budget."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.scripts import think_steps
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus


def test_a_budget_paused_run_shows_its_totals_and_continues_once_raised(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline(
        think_steps(8), web_folder / "budget-ws", tools=("think", "finish"), max_total_tokens=1200
    )
    conversation = web_client.create_conversation(settings, title="budgeted run")
    conversation.send_message("think")
    assert conversation.run() is ConversationStatus.PAUSED
    paused = conversation.info()
    tokens = paused.prompt_tokens + paused.completion_tokens
    open_conversation(page, web_server.base_url, conversation.id)
    view = page.locator(".conversation")
    expect(view).to_have_attribute("data-status", "paused")
    usage = page.locator(".conversation-head .usage")
    expect(usage).to_have_text(f"{tokens:,} of 1,200 tokens · $0.0000")
    expect(page.locator(".status-reason")).to_contain_text(
        "Paused: budget reached: max_total_tokens 1,200"
    )
    expect(page.locator(".item-pause").last).to_contain_text("Paused by the runtime")
    screenshot(page, "budget-paused")

    conversation.raise_budget(max_total_tokens=50_000)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(view).to_have_attribute("data-status", "finished")
    done = conversation.info()
    assert done.prompt_tokens + done.completion_tokens > tokens
    total = done.prompt_tokens + done.completion_tokens
    # The live events added their usage; the list's refresh brings the raised budget.
    expect(usage).to_have_text(f"{total:,} of 50,000 tokens · $0.0000", timeout=15_000)
