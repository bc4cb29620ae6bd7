"""Crash safety: a child appending in a loop is killed with SIGKILL at random moments; after
each kill every acknowledged append is stored, nothing half-written shows, head and events agree.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections import Counter

import pytest

from support.postgres import backends
from support.store_workers import append_until_killed
from support.waiting import wait_until
from treadle.events.audit import audit_events
from treadle.events.tree import EventTree
from treadle.store.urls import open_store

KILLS = 50


def _kill_at_random(url: str, conversation: str, round_number: int, rng: random.Random):
    """Start a child, let it append for a random moment, SIGKILL it; its acknowledged appends."""
    # fork: the child starts in milliseconds (spawn would re-import for ~0.5 s every round).
    # The parent holds no store connection while forking.
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(
        target=append_until_killed, args=(url, conversation, round_number * 1_000_000, sender)
    )
    child.start()
    sender.close()
    acknowledged: list[tuple[int, list[tuple[int, str]]]] = []
    try:
        assert receiver.poll(60), "the child never acknowledged an append"
        acknowledged.append(receiver.recv())
        time.sleep(rng.uniform(0.0, 0.04))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    if url.startswith("postgresql"):
        # The killed child's server backend may still commit what it had been sent; the check
        # reads the count and the rows apart, so it waits until that backend is gone.
        wait_until(lambda: backends(url) == 0, 30, "the killed child's connections ended")
    while True:
        try:
            acknowledged.append(receiver.recv())
        except EOFError:
            break  # the child is dead and its pipe drained (a torn message ends here too)
    receiver.close()
    return acknowledged


def _check_store(url: str, conversation: str, acknowledged: dict[int, str]) -> int:
    store = open_store(url)
    try:
        integrity = getattr(store, "integrity_check", None)
        if integrity is not None:
            assert integrity() == []
        info = store.get_conversation(conversation)
        stored = store.get_range(conversation, 0, 10**9)
        assert [item.seq for item in stored] == list(range(len(stored)))
        assert info.event_count == len(stored), "the count and the rows agree"
        for seq, event_id in acknowledged.items():
            assert seq < len(stored), f"acknowledged seq {seq} lost"
            assert stored[seq].event.id == event_id, f"acknowledged seq {seq} changed"
        # batches are all or nothing, even the one the kill interrupted
        sizes = Counter(item.event.extra["batch"] for item in stored)
        for item in stored:
            assert sizes[item.event.extra["batch"]] == item.event.extra["size"]
        events = [item.event for item in stored]
        assert info.head_id == EventTree(events).default_head(), "head and events agree"
        assert audit_events(events, head=info.head_id).clean
        return len(stored)
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "durability"),
    [
        ("sqlite", "durable"),
        ("sqlite", "fast"),
        pytest.param("postgres", "durable", marks=pytest.mark.postgres),
    ],
)
def test_sigkill_never_loses_an_acknowledged_append(request, backend: str, durability: str):
    base = request.getfixturevalue(f"{backend}_url")
    url = f"{base}{'&' if '?' in base else '?'}durability={durability}"
    store = open_store(url)
    store.create_conversation("crash")
    store.close()
    rng = random.Random(durability)
    acknowledged: dict[int, str] = {}
    stored = 0
    for round_number in range(KILLS):
        for _, appended in _kill_at_random(url, "crash", round_number, rng):
            for seq, event_id in appended:
                assert acknowledged.setdefault(seq, event_id) == event_id
        stored = _check_store(url, "crash", acknowledged)
    assert len(acknowledged) > KILLS  # the children did append between kills
    assert stored >= len(acknowledged)
