"""The Canvas lists the store's evals under the conversations; an eval's screen shows its
tasks with their results, and each task opens the conversation of its last attempt."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import screenshot
from support.eval_tasks import EXPECTED, InProcessEngine, write_eval
from support.server_process import ServerProcess
from treadle.eval.driver import EvalPlan, run_eval
from treadle.eval.tasks import read_task_file
from treadle.store.eval_results import open_eval_results
from treadle.store.urls import open_store


def test_an_eval_lists_its_tasks_and_opens_their_conversations(
    page: Page, web_server: ServerProcess, web_folder: Path
) -> None:
    tasks = [EXPECTED[0], EXPECTED[7], EXPECTED[-1]]  # a pass, a failed verify, a model error
    url = web_server.store_url
    store = open_store(url)
    results = open_eval_results(url)
    try:
        plan = EvalPlan(
            "eval-canvas", read_task_file(write_eval(web_folder / "eval", tasks)), None, url
        )
        run = run_eval(plan, InProcessEngine(), results, store)
    finally:
        results.close()
        store.close()
    page.goto(f"{web_server.base_url}/#/")
    entry = page.locator("#eval-list li[data-eval-id='eval-canvas']")
    passed = sum(task.passed for task in tasks)
    expect(entry.locator(".eval-pass")).to_have_text(f"{passed}/3 passed")
    entry.locator("button").click()
    rows = page.locator(".eval-screen table.eval-tasks tbody tr")
    expect(rows).to_have_count(3)
    for row, task in zip(rows.all(), tasks, strict=True):
        expect(row).to_have_attribute("data-task-id", task.id)
        expect(row).to_have_attribute("data-passed", "true" if task.passed else "false")
    expect(page.locator(".eval-summary")).to_contain_text(f"{passed}/3 passed")
    screenshot(page, "eval-screen")
    conversation_id = {row.task_id: row.conversation_id for row in run.tasks}[tasks[0].id]
    rows.first.locator("button.eval-open").click()
    page.wait_for_selector("body[data-interactive='true']")
    assert page.url.endswith(f"#/c/{conversation_id}")
    expect(page.locator(".conversation")).to_have_attribute("data-status", tasks[0].status)
    page.go_back()
    expect(rows).to_have_count(3)  # back on the eval's screen


def test_a_malformed_link_opens_the_home_screen(page: Page, web_server: ServerProcess) -> None:
    # "%" that is not an escape made decodeURIComponent throw in the router: an uncaught
    # URIError, and the screen never changed.
    page.goto(f"{web_server.base_url}/#/")
    expect(page.locator("#welcome")).to_be_visible()
    for link in ("#/e/%E0%A4%A", "#/c/%"):
        page.goto(f"{web_server.base_url}/#/e/eval-none")
        expect(page.locator(".eval-screen .error-text")).to_be_visible()
        page.evaluate("(hash) => { location.hash = hash; }", link)
        expect(page.locator("#welcome")).to_be_visible()


def _stored_eval(url: str, folder: Path, eval_id: str, tasks: list, rename: dict | None = None):
    tasks_file = write_eval(folder, tasks)
    for old, new in (rename or {}).items():
        tasks_file.write_text(tasks_file.read_text().replace(f'"{old}"', f'"{new}"'))
    store = open_store(url)
    results = open_eval_results(url)
    try:
        plan = EvalPlan(eval_id, read_task_file(tasks_file), None, url)
        return run_eval(plan, InProcessEngine(), results, store)
    finally:
        results.close()
        store.close()


def test_an_eval_screen_shows_reasons_usage_patches_verify_output_and_a_comparison(
    page: Page, web_server: ServerProcess, web_folder: Path
) -> None:
    by_id = {task.id: task for task in EXPECTED}
    url = web_server.store_url
    _stored_eval(url, web_folder / "a", "eval-a", [by_id["sed-fix"], by_id["no-change"]])
    # B's "wrong-fix" takes the id sed-fix, so that the two pair up and differ on it.
    _stored_eval(
        url, web_folder / "b", "eval-b", [by_id["wrong-fix"], by_id["no-change"]],
        rename={"wrong-fix": "sed-fix"},
    )  # fmt: skip
    page.goto(f"{web_server.base_url}/#/e/eval-a")
    expect(page.locator(".eval-model")).to_have_text("model per task")
    expect(page.locator(".eval-summary")).to_contain_text("pass@1 50.0% ± 50.0%")
    passed = page.locator(".eval-tasks tbody tr[data-task-id='sed-fix']")
    failed = page.locator(".eval-tasks tbody tr[data-task-id='no-change']")
    expect(failed.locator(".eval-reason")).to_have_text("verify exited 1")
    expect(passed.locator(".eval-reason")).to_have_text("")
    expect(passed.locator(".eval-tokens")).not_to_have_text("0")
    expect(passed.locator(".eval-cost")).to_have_text("0.0000")
    expect(passed.locator(".eval-seconds")).to_have_text(re.compile(r"^\d+\.\d$"))
    detail = page.locator(".eval-detail[data-task-id='sed-fix']")
    detail.locator("summary").click()
    expect(detail.locator(".eval-patch .diff-add")).to_contain_text(["+    return a + b"])
    expect(detail.locator(".eval-patch .diff-del")).to_contain_text(["-    return a - b"])
    other = page.locator(".eval-detail[data-task-id='no-change']")
    other.locator("summary").click()
    expect(other.locator(".eval-verify")).to_contain_text("AssertionError")
    page.select_option("select[name='compare-with']", "eval-b")
    page.locator("button.eval-compare-button").click()
    difference = page.locator(".eval-differences tbody tr[data-task-id='sed-fix']")
    expect(difference.locator(".eval-change")).to_have_text("passed in A, failed in B")
    expect(difference.locator(".eval-reason")).to_have_text("verify exited 1")
    expect(page.locator(".eval-paired")).to_contain_text("+50.0% ± 50.0% over 2 common tasks")
    screenshot(page, "eval-compare")
    passed.locator("button.eval-open").click()
    page.wait_for_selector("body[data-interactive='true']")
    assert "#/c/" in page.url
