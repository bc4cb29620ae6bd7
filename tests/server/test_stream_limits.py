"""Streams leave nothing behind and refuse what they cannot serve: 200 streams opened and closed
return a real server's threads, fds and PostgreSQL connections to the baseline; bad cursors, a
replay from far before the log and a store that fails get a close frame with a code and reason."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from support.postgres import backends, fresh_schema_url
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import TreadleClient
from treadle.events.model import MessageEvent
from treadle.server.stream import Hubs, Listener
from treadle.store.urls import open_store

AT_ONCE = 10
"""Streams open at the same time; twenty rounds of them make the 200."""
ROUNDS = 20
WORKER_SLACK = AT_ONCE
"""Threads the server's bounded worker pool (anyio's, at most 40) may add after the warm-up:
it grows with how many stream openings happen to overlap, at most the AT_ONCE opened together
(under load more of them overlap than in the warm-up: 5 more threads were seen). A leak is one
thread per stream: 200."""
FDS_PER_WORKER = 3
"""A worker's own SQLite connection: the database, its WAL and its shared-memory file."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store_url(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'server.db'}"
    else:
        with fresh_schema_url("treadle_streams") as url:
            yield url


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _settle(measure: Callable[[], dict[str, int]], bound: dict[str, int]) -> dict[str, int]:
    """The figures once each is within ``bound`` (or after 30 s: then the test fails). A hub
    ends within its store's poll interval after its last listener leaves; a pool worker after
    10 s idle."""
    deadline = time.monotonic() + 30
    while True:
        figures = measure()
        if all(figures[name] <= bound[name] for name in bound) or time.monotonic() > deadline:
            return figures
        time.sleep(0.05)


def _steady(measure: Callable[[], dict[str, int]]) -> dict[str, int]:
    """The figures once they stop falling (the warm-up's hubs have ended)."""
    figures = measure()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = measure()
        if again == figures:
            break
        figures = again
    return figures


def _stream_url(server: ServerProcess, conversation_id: str, query: str = "") -> str:
    base = server.base_url.replace("http", "ws")
    return f"{base}/api/conversations/{conversation_id}/events/stream{query}"


def _open_and_read_first(url: str) -> ClientConnection:
    """A stream that has joined its hub: its replay (after the join) sent the first event."""
    socket = connect(url, open_timeout=10, legacy=True)
    first = json.loads(socket.recv(timeout=10))
    assert (first["type"], first["seq"]) == ("event", 0)
    return socket


def _round(server: ServerProcess, conversation_ids: list[str], pool: ThreadPoolExecutor) -> list:
    urls = [_stream_url(server, cid) for cid in conversation_ids]
    return list(pool.map(_open_and_read_first, urls))


def _conversations(store_url: str, count: int) -> list[str]:
    """Conversations of one user message each, written straight to the server's store."""
    with open_store(store_url) as store:
        ids = [store.create_conversation().id for _ in range(count)]
        for conversation_id in ids:
            store.append(conversation_id, MessageEvent(source="user", text="hello"))
    return ids


def test_200_streams_opened_and_closed_return_threads_fds_and_connections_to_baseline(
    any_store_url, tmp_path
):
    server = ServerProcess(any_store_url, log_dir=tmp_path).start()
    postgres = any_store_url.startswith("postgresql")
    try:
        assert server.process is not None
        pid = server.process.pid
        warm_up = _conversations(any_store_url, AT_ONCE * 3)
        # A conversation per stream: the leak was one hub (a thread, a store connection) per
        # streamed conversation, left behind when its last stream closed.
        streamed = _conversations(any_store_url, AT_ONCE * ROUNDS)

        def measure() -> dict[str, int]:
            figures = {"threads": _threads(pid), "fds": _fds(pid)}
            if postgres:
                figures["connections"] = backends(any_store_url)
                figures["subscriptions"] = backends(any_store_url, "subscribe")
            return figures

        with ThreadPoolExecutor(AT_ONCE) as pool:
            # Rounds on other conversations first, so the server's worker threads and pool
            # connections that a round of AT_ONCE streams needs are in the baseline.
            for start in range(0, len(warm_up), AT_ONCE):
                for socket in _round(server, warm_up[start : start + AT_ONCE], pool):
                    socket.close()
            baseline = _steady(measure)
            if postgres:
                assert baseline["subscriptions"] == 0
            for start in range(0, len(streamed), AT_ONCE):
                sockets = _round(server, streamed[start : start + AT_ONCE], pool)
                if postgres and start == 0:  # the count sees them while they are open
                    # (a hub connects in its own thread, a moment after its stream's replay)
                    wait_until(
                        lambda: backends(any_store_url, "subscribe") == AT_ONCE,
                        15,
                        "one subscription per open stream",
                    )
                for socket in sockets:
                    socket.close()
        bound = {
            "threads": baseline["threads"] + WORKER_SLACK,
            # A worker more holds its SQLite files, or on PostgreSQL the socket of the pool's
            # connection more that it may keep (CI under load: 3 more of each).
            "fds": baseline["fds"] + WORKER_SLACK * (1 if postgres else FDS_PER_WORKER),
        }
        if postgres:
            # The store's pool may keep a connection more for a worker thread more; the leak
            # was one connection per stream (200 here).
            bound |= {"subscriptions": 0, "connections": baseline["connections"] + WORKER_SLACK}
        after = _settle(measure, bound)
        assert all(after[name] <= bound[name] for name in bound), (baseline, after)

        # The hubs are gone, not broken: a stream on a streamed conversation still follows.
        url = _stream_url(server, streamed[0], "?after_seq=0")
        with connect(url, open_timeout=10) as socket, open_store(any_store_url) as store:
            seq = store.append(streamed[0], MessageEvent(source="user", text="again"))
            message = json.loads(socket.recv(timeout=10))
        assert (message["type"], message["seq"]) == ("event", seq)
    finally:
        server.stop()


def _close_of(url: str) -> tuple[int, str]:
    """The close code and reason of a stream that the server refuses after accepting it."""
    with connect(url, open_timeout=10) as socket:
        while True:
            try:
                socket.recv(timeout=10)
            except ConnectionClosed as closed:
                frame = closed.rcvd
                break
    assert frame is not None, "dropped without a close frame"
    return frame.code, frame.reason


BAD_PARAMETERS = [
    "after_seq=1e23",
    "after_seq=100000000000000000000000",
    "after_seq=-10000000000000",
    "after_seq=-2",
    "after_seq=9223372036854775808",
    "after_seq=abc",
    "limit=-1",
    "limit=1e23",
    "batch=maybe",
]


def test_a_bad_parameter_gets_a_close_frame_naming_it(client, server, settings_for):
    conversation = client.create_conversation(settings_for([]))
    conversation.send_message("one")
    for query in BAD_PARAMETERS:
        code, reason = _close_of(_stream_url(server, conversation.id, f"?{query}"))
        name = query.split("=")[0]
        assert (code, name in reason) == (4400, True), (query, code, reason)
        if name == "after_seq":
            assert "-1 to 2^63-1" in reason, reason


def test_the_largest_cursor_is_valid_and_follows_live_events(client, server, settings_for):
    conversation = client.create_conversation(settings_for([]))
    conversation.send_message("one")
    url = _stream_url(server, conversation.id, "?after_seq=9223372036854775807")
    # Nothing is stored after that seq: the stream stays open (no error, no replay).
    with connect(url, open_timeout=10) as socket, pytest.raises(TimeoutError):
        socket.recv(timeout=0.3)


def test_a_replay_from_minus_one_starts_at_the_first_stored_seq(client, server, settings_for):
    conversation = client.create_conversation(settings_for([]))
    for text in ("one", "two", "three"):
        conversation.send_message(text)
    with connect(_stream_url(server, conversation.id, "?after_seq=-1"), open_timeout=10) as ws:
        seqs = [json.loads(ws.recv(timeout=10))["seq"] for _ in range(3)]
    assert seqs == [0, 1, 2]


def test_an_unknown_conversation_gets_4404(server):
    assert _close_of(_stream_url(server, "no-such-conversation"))[0] == 4404


def test_a_store_that_fails_while_a_stream_opens_closes_it_with_a_reason(
    settings_for, tmp_path: Path
):
    # The SQLite file is replaced by garbage under the running server: opening a stream now
    # fails in the store, which must end in a close frame with a code, not a dropped socket.
    db = tmp_path / "server.db"
    server = ServerProcess(f"sqlite:///{db}", log_dir=tmp_path).start()
    try:
        with TreadleClient(server.base_url) as client:
            conversation_id = client.create_conversation(settings_for([])).id
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{db}{suffix}")
            if path.exists():
                path.write_bytes(b"this is not a database" * 100)
        code, reason = _close_of(_stream_url(server, conversation_id))
        assert code in (1011, 1013), (code, reason)
        assert reason.startswith(("store error", "store unavailable")), reason
    finally:
        server.stop()


def test_joins_racing_the_last_leave_always_get_a_live_hub(tmp_path: Path):
    # In-process: threads join and leave one conversation's hub as fast as they can, so joins
    # land while a last listener leaves. A join must never land on a stopping hub (it would
    # get no events), and once all have left no hub thread is left.
    store = open_store(f"sqlite:///{tmp_path / 'hubs.db'}")
    conversation_id = store.create_conversation().id
    hubs = Hubs(store)
    loop = asyncio.new_event_loop()
    stale: list[int] = []

    def churn() -> None:
        for _ in range(100):
            listener = Listener(loop=loop)
            hubs.join(conversation_id, listener)
            if listener.hub is None or listener.hub.stopping:
                stale.append(1)
            hubs.leave(listener)

    try:
        workers = [threading.Thread(target=churn) for _ in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        deadline = time.monotonic() + 10
        while _hub_threads() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert stale == []
        assert _hub_threads() == []
    finally:
        loop.close()
        store.close()


def _hub_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("treadle-hub-")]
