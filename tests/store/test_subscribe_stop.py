"""``subscribe(stop=...)``: another thread ends a subscription that is waiting for events, and
its connection is freed (the server's stream hubs rely on it to leave nothing behind)."""

from __future__ import annotations

import os
import threading

from support.postgres import backends
from support.waiting import wait_until
from treadle.events.model import MessageEvent
from treadle.store.base import EventStore, StoredEvent


def _subscription_connections(store: EventStore) -> int:
    """PostgreSQL: backends of this store's subscriptions. SQLite: this process's open files
    on the store's database (its subscription opens a connection of its own)."""
    url = store.url
    if url.startswith("postgresql"):
        return backends(url, "subscribe")
    database = str(store.path)  # type: ignore[attr-defined]
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # closed meanwhile (the listing's own fd)
    return sum(1 for link in links if link.startswith(database))


def _follow_then_stop(store: EventStore, conversation_id: str) -> tuple[list[int], int]:
    """Seqs a subscription read before ``stop`` ended it, and its connections while it ran."""
    stop = threading.Event()
    stream = store.subscribe(conversation_id, poll_interval=0.01, stop=stop)
    got: list[StoredEvent] = []
    first = threading.Event()

    def follow() -> None:
        for stored in stream:
            got.append(stored)
            first.set()

    follower = threading.Thread(target=follow)
    follower.start()
    assert first.wait(10)  # it has read the stored event and now waits for new ones
    while_open = _subscription_connections(store)
    stop.set()
    follower.join(10)
    assert not follower.is_alive(), "the subscription did not end when stop was set"
    return [stored.seq for stored in got], while_open


def test_stop_ends_a_waiting_subscription_and_frees_its_connection(store: EventStore) -> None:
    conversation_id = store.create_conversation().id
    store.append(conversation_id, MessageEvent(source="user", text="one"))
    before = _subscription_connections(store)
    seqs, while_open = _follow_then_stop(store, conversation_id)
    assert seqs == [0]
    assert while_open > before
    # SQLite keeps one closed connection's file open for reuse while another connection of
    # the process holds a lock on the file (POSIX locks are per process); PostgreSQL none (its
    # server ends a closed connection's backend on its own schedule: wait for it).
    bound = before + (0 if store.url.startswith("postgresql") else 1)
    wait_until(lambda: _subscription_connections(store) <= bound, 30, "connections freed")
    for _ in range(3):  # and nothing more per subscription
        assert _follow_then_stop(store, conversation_id)[0] == [0]
        wait_until(lambda: _subscription_connections(store) <= bound, 30, "connections freed")
