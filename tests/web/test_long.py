"""A long conversation: the first screen shows the newest events from one page, the DOM holds a
bounded window of items, and scrolling back loads older pages (newest first, by seq cursor)."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot, wait_until
from support.server_process import ServerProcess
from treadle.bench.canvas import clean_chunks
from treadle.store.urls import open_store

EVENTS = 3000
MAX_WINDOW = 150  # transcript.js


LOADED = "window.treadle.screen.branch.ids.size"
SCROLL_TOP = "(document.querySelector('.transcript').scrollTop = 0) === 0"


def loaded(page: Page) -> int:
    return page.evaluate(LOADED)


def test_long_conversation_is_paged_and_windowed(page: Page, web_server: ServerProcess) -> None:
    store = open_store(web_server.store_url)
    try:
        info = store.create_conversation(title="Long")
        for chunk in clean_chunks(EVENTS, seed=11):
            store.append_batch(info.id, chunk)
    finally:
        store.close()
    open_conversation(page, web_server.base_url, info.id)
    expect(page.locator(".transcript .seq", has_text=f"#{EVENTS - 1}").first).to_be_in_viewport()
    first_page = page.evaluate("window.treadle.screen.branch.raw.length")
    assert first_page <= 100  # one page of transcript items, not the conversation
    assert loaded(page) < EVENTS

    while loaded(page) < 1000:  # scroll back: older pages come in
        before = loaded(page)
        wait_until(page, f"{SCROLL_TOP} && {LOADED} > {before}")
    items = page.locator(".transcript .items > .item").count()
    assert items <= MAX_WINDOW, items  # the DOM keeps a window, whatever was loaded
    screenshot(page, "long-scrolled-back")

    page.evaluate("document.querySelector('.transcript').scrollTop = 1e9")
    page.wait_for_timeout(100)
    for _ in range(40):  # slide the window back down to the newest events
        if page.locator(".transcript .seq", has_text=f"#{EVENTS - 1}").count():
            break
        page.evaluate("document.querySelector('.transcript').scrollTop = 1e9")
        page.wait_for_timeout(50)
    expect(page.locator(".transcript .seq", has_text=f"#{EVENTS - 1}").first).to_be_attached()
    assert page.locator(".transcript .items > .item").count() <= MAX_WINDOW
