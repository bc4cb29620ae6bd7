"""Browser fixtures: Debian's Chromium driven by Playwright (headless, no sandbox, no background
networking) against a real ``treadle serve`` on 127.0.0.1; screenshots go to test-artifacts/web."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from support.canvas import ARTIFACTS
from support.server_process import ServerProcess
from treadle.bench.chromium import CHROMIUM_ARGS, CHROMIUM_PATH
from treadle.client import TreadleClient

ARTIFACTS.mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM_PATH, headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def web_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("canvas")


@pytest.fixture(scope="module")
def web_server(web_folder: Path) -> Iterator[ServerProcess]:
    """One server for a module's tests: each test makes its own conversations."""
    process = ServerProcess(f"sqlite:///{web_folder / 'canvas.db'}", log_dir=web_folder).start()
    yield process
    process.stop()


@pytest.fixture
def web_client(web_server: ServerProcess) -> Iterator[TreadleClient]:
    with TreadleClient(web_server.base_url) as opened:
        yield opened


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab on a laptop-sized screen; any uncaught script error fails the test."""
    context = browser.new_context(viewport={"width": 1366, "height": 820})
    opened = context.new_page()
    opened.set_default_timeout(10_000)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, errors
