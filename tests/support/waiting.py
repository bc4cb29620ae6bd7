"""Waiting for a condition another thread or process brings about, with a deadline (a test that
waits is never a timing assertion: it fails only when the condition never comes)."""

from __future__ import annotations

import time
from collections.abc import Callable

DEADLINE_S = 120.0
"""How long a test waits for what another thread brings about: far past what it takes on a
loaded machine (importing LiteLLM alone, a conversation's first step on a LiteLLM model, took
20 s of wall time beside two CPU burners and a suite)."""


def wait_until(
    condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s} s"
        time.sleep(0.02)
