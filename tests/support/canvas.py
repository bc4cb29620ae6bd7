"""What the Canvas's browser tests share: where screenshots go, and
small steps (open a conversation, wait until it is interactive, take a screenshot)."""

from __future__ import annotations

import time
from pathlib import Path

from playwright.sync_api import Page

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"


def open_conversation(page: Page, base_url: str, conversation_id: str) -> None:
    """Loads the Canvas on a conversation and waits until its first screen is interactive."""
    page.goto(f"{base_url}/#/c/{conversation_id}")
    page.wait_for_selector("body[data-interactive='true']")


def screenshot(page: Page, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def wait_until(page: Page, expression: str, timeout_s: float = 10.0) -> None:
    """Polls a JS expression until it is truthy. (``page.wait_for_function`` evaluates its
    predicate with eval, which the Canvas's Content-Security-Policy rightly forbids.)"""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout_s} s: {expression}")
        time.sleep(0.02)
