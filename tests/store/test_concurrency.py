"""APPEND under contention: 4 processes x 2,000 appends into one conversation, each choosing
parents among the events stored so far -> no duplicate, no loss, gap-free seqs, audit clean."""

from __future__ import annotations

import multiprocessing
import random

import pytest

from support.store_workers import append_with_random_parents
from treadle.events.audit import audit_events
from treadle.events.tree import EventTree
from treadle.store.base import EventStore

WORKERS = 4
APPENDS = 2_000


@pytest.mark.slow
def test_four_processes_append_into_one_conversation(store: EventStore) -> None:
    conversation = store.create_conversation("shared").id
    context = multiprocessing.get_context("spawn")
    pipes, children = [], []
    for worker in range(WORKERS):
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(
            target=append_with_random_parents,
            args=(store.url, conversation, worker, APPENDS, sender),
        )
        child.start()
        sender.close()
        pipes.append(receiver)
        children.append(child)
    acknowledged: list[tuple[int, str]] = []
    for receiver in pipes:
        assert receiver.poll(600), "a worker did not finish in time"
        acknowledged.extend(receiver.recv())
    for child in children:
        child.join(60)
        assert child.exitcode == 0

    stored = store.get_range(conversation, 0, 10**9)
    seqs = [item.seq for item in stored]
    event_ids = [item.event.id for item in stored]
    assert seqs == list(range(len(stored))), "seq must be gap-free from 0"
    assert len(set(event_ids)) == len(event_ids), "no duplicate id"
    assert sorted(acknowledged) == list(zip(seqs, event_ids, strict=True)), (
        "every acknowledged append is stored at its seq, and nothing else is"
    )
    assert len(acknowledged) >= WORKERS * APPENDS
    info = store.get_conversation(conversation)
    assert info.event_count == len(stored)

    events = [item.event for item in stored]
    tree = EventTree(events)
    assert info.head_id == tree.default_head()
    report = audit_events(events, head=info.head_id)
    assert report.clean, report.violations[:5]
    rng = random.Random(0)
    for event in rng.sample(events, 40):
        expected = [e.id for e in tree.path_to_root(event.id)]
        assert [e.id for e in store.path_to_root(conversation, event.id)] == expected
