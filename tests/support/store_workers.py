"""Child-process bodies for the store tests (spawned processes import them by module name).

Each opens the store by URL itself, as a separate program would, and reports on a pipe.
"""

from __future__ import annotations

import contextlib
import random
import time
from multiprocessing.connection import Connection

from treadle.events.model import ROOT, Event, MessageEvent, StateChangeEvent
from treadle.store.base import ConversationExists
from treadle.store.urls import open_store


def append_messages(url: str, conversation: str, count: int) -> None:
    """Append ``count`` legacy-parent messages p0, p1, ... with short pauses."""
    store = open_store(url)
    try:
        for index in range(count):
            store.append(conversation, MessageEvent(id=f"p{index}", source="user", text="x"))
            if index % 25 == 0:
                time.sleep(0.01)
    finally:
        store.close()


def open_and_append(path: str, worker: int) -> None:
    """Open (maybe first, racing others) the store at ``path`` and append one root."""
    store = open_store(f"sqlite:///{path}")
    try:
        with contextlib.suppress(ConversationExists):  # another process created it first
            store.create_conversation("c")
        store.append("c", MessageEvent(id=f"w{worker}", source="user", parent_id=ROOT))
    finally:
        store.close()


def append_with_random_parents(
    url: str, conversation: str, worker: int, count: int, report: Connection
) -> None:
    """Append ``count`` events whose parents are chosen among the events stored so far
    (by any process), and report every acknowledged (seq, id) then None."""
    rng = random.Random(worker)
    store = open_store(url)
    try:
        acknowledged: list[tuple[int, str]] = []
        for index in range(count):
            event_id = f"w{worker}-{index}"
            roll = rng.random()
            if roll < 0.3:
                parent: str | None = None  # legacy: whatever was appended just before
            elif roll < 0.33:
                parent = ROOT
            else:
                stored = store.get_conversation(conversation).event_count
                if stored == 0:
                    parent = ROOT
                elif roll < 0.7:
                    parent = store.get_range(conversation, stored - 1, stored)[0].event.id
                else:
                    seq = rng.randrange(stored)
                    parent = store.get_range(conversation, seq, seq + 1)[0].event.id
            event: Event = MessageEvent(id=event_id, source="agent", text=f"{worker}:{index}")
            event = event.model_copy(update={"parent_id": parent})
            if index % 50 == 7:
                batch = [event, StateChangeEvent(id=f"{event_id}s", key="k", value=index)]
                seqs = store.append_batch(conversation, batch)
                acknowledged.extend(zip(seqs, [e.id for e in batch], strict=True))
            else:
                acknowledged.append((store.append(conversation, event), event_id))
        report.send(acknowledged)
    finally:
        store.close()
        report.close()


def append_until_killed(url: str, conversation: str, start: int, report: Connection) -> None:
    """Append forever (single events and batches), reporting each acknowledged append as
    (batch number, [(seq, id), ...]) once ``append``/``append_batch`` has returned."""
    store = open_store(url)
    rng = random.Random(start)
    number = start
    while True:
        size = rng.choice([1, 1, 1, 2, 4])
        events: list[Event] = []
        for index in range(size):
            event_id = f"b{number}-{index}"
            extra = {"batch": number, "size": size}
            if index == size - 1 and size > 1:
                events.append(StateChangeEvent(id=event_id, key="batch", value=number, extra=extra))
            else:
                events.append(
                    MessageEvent(id=event_id, source="agent", text="y" * 600, extra=extra)
                )
        if size == 1:
            acknowledged = [(store.append(conversation, events[0]), events[0].id)]
        else:
            seqs = store.append_batch(conversation, events)
            acknowledged = list(zip(seqs, [e.id for e in events], strict=True))
        report.send((number, acknowledged))
        number += 1
