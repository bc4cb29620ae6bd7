"""``treadle bench canvas``: how fast the Canvas shows a conversation in a real browser (Debian's
Chromium driven by Playwright) — first rendered event, interactive, older page, JS heap.

Each size is one conversation filled straight into a fresh SQLite store with the realistic mix of
``bench.workload`` (clean: unique call ids, every call answered), served by a real
``treadle serve``. Every load is a cold tab (new browser context) on ``/#/c/ID``; the figures are
medians of ``runs`` loads after one warm-up load, read from the page's own performance marks, in
ms since navigation start, each set once its frame is painted: ``treadle:first-event`` (the newest
events are on screen) and ``treadle:interactive`` (and the controls work and the live stream is
connected). The heap is V8's used JS heap after a forced GC (CDP), with the DOM node count.

The request count opens a branched conversation (BRANCHES branches) in a cold tab, opens
its Branches tab, and counts the page's HTTP requests (Playwright's request events) from the
navigation until the tree is drawn and the page is quiet (its list and its audit loaded): those
to ``/api/`` apart from the static files (the page, its modules, styles and icon).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from treadle.bench.chromium import CHROMIUM_ARGS, CHROMIUM_PATH
from treadle.bench.workload import realistic_events
from treadle.events.model import ROOT, ActionEvent, Event, MessageEvent, ObservationEvent
from treadle.server.process import ServerProcess
from treadle.store.urls import open_store

SIZES = (100, 10_000, 100_000)
VIEWPORT = {"width": 1366, "height": 820}
CHUNK = 1_000
OLDER_PAGES = 10
"""Older pages loaded (scrolling back) before the second heap figure."""
BRANCHES = 4
"""Heads of the conversation whose requests are counted (one main line, three forks)."""
BRANCHED_EVENTS = 200


# -- the conversations -------------------------------------------------------------------------


def clean_chunks(total: int, *, seed: int = 7) -> Iterator[list[Event]]:
    """``total`` realistic events as one chain, in lists of about CHUNK.

    Each chunk ends where every call is answered, and its response and call ids get the chunk's
    prefix: a long log made of short ones must not repeat call ids (LINK-UNIQUE) or leave a call
    unanswered before the next model response (LINK-ORPHAN), or the page would show audit marks.
    """
    parent, made, chunk = ROOT, 0, 0
    while made < total:
        events = _answered_prefix(realistic_events(min(CHUNK, total - made) + 8, seed=seed + chunk))
        events = [_renamed(event, f"k{chunk}-") for event in events[: total - made]]
        events[0] = events[0].model_copy(update={"parent_id": parent})
        yield events
        parent, made, chunk = events[-1].id, made + len(events), chunk + 1


def _answered_prefix(events: list[Event]) -> list[Event]:
    """The longest prefix after which no call waits for its result (all of it when none does)."""
    settled = _settled_positions(events)
    return events[: max(settled[-1] if settled else 0, 1)]


def _settled_positions(events: list[Event]) -> list[int]:
    """The lengths of the prefixes after which no call waits for its result."""
    pending: set[str] = set()
    positions = []
    for position, event in enumerate(events, start=1):
        if isinstance(event, ActionEvent):
            pending.add(event.tool_call_id)
        elif isinstance(event, ObservationEvent):
            pending.discard(event.tool_call_id)
        if not pending:
            positions.append(position)
    return positions


def _renamed(event: Event, prefix: str) -> Event:
    if isinstance(event, ActionEvent):
        return event.model_copy(
            update={
                "tool_call_id": prefix + event.tool_call_id,
                "llm_response_id": prefix + event.llm_response_id,
            }
        )
    if isinstance(event, ObservationEvent):
        return event.model_copy(update={"tool_call_id": prefix + event.tool_call_id})
    return event


def fill_conversations(store_url: str, sizes: Sequence[int]) -> dict[int, str]:
    """One conversation per size; returns their ids by size."""
    store = open_store(store_url)
    try:
        ids = {}
        for size in sizes:
            info = store.create_conversation(title=f"bench canvas {size:,} events")
            for events in clean_chunks(size, seed=size):
                store.append_batch(info.id, events)
            ids[size] = info.id
        return ids
    finally:
        store.close()


def fill_branched(store_url: str, total: int = BRANCHED_EVENTS) -> str:
    """A conversation of about ``total`` events with BRANCHES heads: the main line, and
    BRANCHES - 1 user messages sent again from earlier points where no call waits (each with
    an answer), so /tree has branch points and the audit stays clean; the head stays on the
    main line."""
    store = open_store(store_url)
    try:
        info = store.create_conversation(title=f"bench canvas {BRANCHES} branches")
        chain = [event for events in clean_chunks(total, seed=3) for event in events]
        store.append_batch(info.id, chain)
        settled = _settled_positions(chain)
        for fork in range(1, BRANCHES):
            base = chain[settled[len(settled) * fork // BRANCHES] - 1]
            question = MessageEvent(
                source="user", text=f"again from here ({fork})", parent_id=base.id
            )
            answer = MessageEvent(source="agent", text=f"answer {fork}", parent_id=question.id)
            store.append_batch(info.id, [question, answer], move_head=False)
        return info.id
    finally:
        store.close()


# -- the server and the browser ----------------------------------------------------------------


MARKS_JS = """() => Object.fromEntries(
  ["treadle:first-event", "treadle:interactive"].map(
    (name) => [name, performance.getEntriesByName(name)[0]?.startTime ?? null]))"""
LOADED_JS = "window.treadle.screen.branch.ids.size"
SETTLED_JS = (
    "document.body.dataset.audit === 'done' || window.treadle.screen.view.event_count > 20000"
)
MORE_JS = "window.treadle.screen.branch.more || window.treadle.screen.transcript.loading"
OLDER_MARKS_JS = "performance.getEntriesByName('treadle:older-page').length"
SCROLL_TOP_JS = "document.querySelector('.transcript').scrollTop = 0"
MARK_TIMES_JS = "(name) => performance.getEntriesByName(name).map((mark) => mark.startTime)"


def load_once(browser: Any, url: str) -> tuple[dict[str, float], Any]:
    """A cold tab on ``url``: its marks, and the open page (the caller closes its context)."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-interactive='true']", timeout=120_000)
    return page.evaluate(MARKS_JS), page


def heap_figures(page: Any) -> dict[str, float]:
    """Used and allocated JS heap (MiB) after a forced GC, and DOM nodes (Chromium's counters)."""
    session = page.context.new_cdp_session(page)
    session.send("HeapProfiler.collectGarbage")
    session.send("Performance.enable")
    metrics = {
        item["name"]: item["value"] for item in session.send("Performance.getMetrics")["metrics"]
    }
    return {
        "heap_mib": metrics["JSHeapUsedSize"] / 2**20,
        "heap_total_mib": metrics["JSHeapTotalSize"] / 2**20,
        "dom_nodes": metrics["Nodes"],
    }


def scroll_back(page: Any, pages: int) -> float | None:
    """Scrolls back until ``pages`` older pages came in (or the branch's start); median ms per
    page from its request (``treadle:older-start``) to its items painted (``treadle:older-page``),
    None when the conversation had no older page."""
    deadline = time.monotonic() + 120
    while page.evaluate(OLDER_MARKS_JS) < pages and page.evaluate(MORE_JS):
        if time.monotonic() > deadline:
            raise RuntimeError("older pages did not come within 120 s")
        page.evaluate(SCROLL_TOP_JS)
        time.sleep(0.02)
    starts = page.evaluate(MARK_TIMES_JS, "treadle:older-start")
    ends = page.evaluate(MARK_TIMES_JS, "treadle:older-page")
    times = [end - start for start, end in zip(starts, ends, strict=False)]
    return statistics.median(times) if times else None


# -- the bench ---------------------------------------------------------------------------------


def run_canvas_bench(
    sizes: Sequence[int] = SIZES, *, runs: int = 5, chromium: str = CHROMIUM_PATH
) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright  # a dev dependency: only the bench needs it

    folder = tempfile.mkdtemp(prefix="treadle-bench-canvas-")
    store_url = f"sqlite:///{Path(folder) / 'canvas.db'}"
    figures: dict[str, Any] = {"runs": runs}
    try:
        start = time.perf_counter()
        ids = fill_conversations(store_url, sizes)
        branched = fill_branched(store_url)
        figures["fill_s"] = time.perf_counter() - start
        server = ServerProcess(store_url).start()
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium, headless=True, args=CHROMIUM_ARGS
                )
                figures["browser"] = browser.version
                for size in sizes:
                    url = f"{server.base_url}/#/c/{ids[size]}"
                    figures.update(measure_size(browser, url, size, runs, size == max(sizes)))
                figures.update(count_requests(browser, f"{server.base_url}/#/c/{branched}"))
                browser.close()
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return figures


def measure_size(browser: Any, url: str, size: int, runs: int, deep: bool) -> dict[str, Any]:
    """Median load marks at one size; for the largest, heap and older pages too."""
    first, interactive = [], []
    for run in range(runs + 1):  # the first load warms the server and the store's cache
        marks, page = load_once(browser, url)
        if run:
            first.append(marks["treadle:first-event"])
            interactive.append(marks["treadle:interactive"])
        if deep and run == runs:
            figures = deep_figures(page, size)
        settle(page)
        page.context.close()
    out = {
        f"first_event_ms_{size}": statistics.median(first),
        f"interactive_ms_{size}": statistics.median(interactive),
    }
    return {**out, **figures} if deep else out


def count_requests(browser: Any, url: str) -> dict[str, Any]:
    """The HTTP requests a cold tab makes to show the conversation at ``url`` with its Branches
    tab open: API ones and static files apart, and the API paths in the order asked."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    try:
        page.goto(url)
        page.wait_for_selector("body[data-interactive='true']", timeout=120_000)
        page.get_by_role("button", name="Branches", exact=True).click()
        page.wait_for_selector("#panel-body svg .tree-head", timeout=120_000)
        settle(page)
        page.wait_for_selector("#conversation-list li", timeout=120_000)
        # Counted now: the list's timed refresh (every 5 s) is not part of showing the page.
        shown = list(urls)
        heads = page.locator("#panel-body svg .tree-head").count()
    finally:
        context.close()
    conversation_id = unquote(urlsplit(url).fragment.removeprefix("/c/"))
    paths = [urlsplit(address).path for address in shown]
    api = [path for path in paths if path.startswith("/api/")]
    return {
        "open_canvas_requests": len(api),
        "open_canvas_static_requests": len(paths) - len(api),
        "open_canvas_branches": heads,
        "open_canvas_api_paths": " ".join(path.replace(conversation_id, "ID") for path in api),
    }


def settle(page: Any) -> None:
    """Waits for the audit the page starts after its first screen (small conversations only):
    left running in the server, it would slow the next load down."""
    deadline = time.monotonic() + 120
    while not page.evaluate(SETTLED_JS) and time.monotonic() < deadline:
        time.sleep(0.02)


def deep_figures(page: Any, size: int) -> dict[str, Any]:
    heap = heap_figures(page)
    older = scroll_back(page, OLDER_PAGES)
    after = heap_figures(page)
    return {
        f"heap_mib_{size}": heap["heap_mib"],
        f"heap_total_mib_{size}": heap["heap_total_mib"],
        f"dom_nodes_{size}": heap["dom_nodes"],
        f"older_page_ms_{size}": older,
        f"heap_mib_{size}_after_{OLDER_PAGES}_older_pages": after["heap_mib"],
        f"dom_nodes_{size}_after_{OLDER_PAGES}_older_pages": after["dom_nodes"],
        f"events_loaded_after_{OLDER_PAGES}_older_pages": page.evaluate(LOADED_JS),
    }
