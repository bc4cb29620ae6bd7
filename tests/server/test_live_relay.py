"""How live output reaches stream clients (server/live_relay.py, server/stream.py): a client that
falls behind has transient frames dropped, never queued without bound nor waited for; on
PostgreSQL a frame published by one process reaches the clients of another (bounded payload),
and the relay's sender thread ends when output stops."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.postgres import backends, fresh_schema_url
from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.api.stream import EventFrame, OutputFrame
from treadle.client import TreadleClient
from treadle.events.model import MessageEvent
from treadle.runtime.live_output import OutputChunk
from treadle.server.live_relay import LiveRelay
from treadle.server.stream import TRANSIENT_BACKLOG, Hubs, Listener
from treadle.store.urls import open_store


def chunk(conversation_id: str, offset: int, text: str) -> OutputChunk:
    return OutputChunk(conversation_id, "action-1", "call-1", "terminal", offset, text)


@pytest.fixture
def running_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in a thread of its own, as a server's is (its sockets' coroutines)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=30)
    loop.close()


def settled(loop: asyncio.AbstractEventLoop) -> None:
    """Wait until the loop has run every callback queued so far."""
    done = threading.Event()
    loop.call_soon_threadsafe(done.set)
    assert done.wait(30)


def test_a_client_that_reads_nothing_gets_output_dropped_not_queued(tmp_path, running_loop):
    store = open_store(f"sqlite:///{tmp_path / 'hub.db'}")
    conversation_id = store.create_conversation().id
    hubs = Hubs(store)
    relay = LiveRelay(store, hubs)
    unread = Listener(loop=running_loop)
    hubs.join(conversation_id, unread)
    try:
        started = time.monotonic()
        for index in range(5000):
            relay(chunk(conversation_id, index, "x"))
        publishing = time.monotonic() - started
        settled(running_loop)
        # One wake-up queued, the newest frames waiting beside it, the oldest dropped.
        assert unread.queue.qsize() == 1
        assert unread.transient_dropped == 5000 - TRANSIENT_BACKLOG
        assert publishing < 5  # never waited for the client (a bound, not a benchmark)
        # Stored events still go to it: live output never makes a client fall behind.
        store.append(conversation_id, MessageEvent(source="user", text="hello"))
        wait_until(lambda: unread.queue.qsize() == 2, 30, "the event")
        waiting = unread.with_transient([unread.queue.get_nowait(), unread.queue.get_nowait()])
        offsets = [json.loads(item.texts[0])["offset"] for item in waiting if item.seq is None]
        assert offsets == list(range(5000 - TRANSIENT_BACKLOG, 5000))
        assert [item.seq for item in waiting if item.seq is not None] == [0]
        assert not unread.dropped
    finally:
        hubs.leave(unread)
        store.close()


def test_a_frame_too_big_for_a_notification_keeps_its_newest_text():
    from treadle.store.postgres import LIVE_PAYLOAD_BYTES, _live_frame, _live_payload

    text = "é" * 3000 + "\x00" * 2000 + "end"  # 2 bytes each, then 6 escaped
    payload = _live_payload(chunk("c", 10, text).frame())
    assert len(payload.encode()) <= LIVE_PAYLOAD_BYTES
    frame = _live_frame(payload)
    assert frame is not None
    assert frame["text"].endswith("end")
    assert frame["offset"] + len(frame["text"]) == 10 + len(text)  # the gap is in the offset
    assert _live_frame('{"seq": 4}') is None


@pytest.mark.postgres
def test_output_run_in_one_server_reaches_a_client_of_another(settings_for, tmp_path: Path):
    command = "echo live-$((20+22)); sleep 2; echo done-$((1+1))"
    responses = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
    ]
    with fresh_schema_url("treadle_live") as url:
        server_a = ServerProcess(url, log_dir=tmp_path).start()
        server_b = ServerProcess(url, log_dir=tmp_path).start()
        try:
            with (
                TreadleClient(server_a.base_url) as via_a,
                TreadleClient(server_b.base_url) as via_b,
            ):
                conversation = via_a.create_conversation(settings_for(responses))
                conversation.send_message("print, wait, print")
                subscription = via_b.conversation(conversation.id).subscribe()
                watchdog = threading.Timer(60, subscription.close)
                watchdog.start()
                frames = subscription.frames()
                seen = [(time.monotonic(), next(frames))]  # the stream has joined B's hub
                # B's hub LISTENs in a thread of its own a moment after the stream joins, and a
                # frame published before that never reaches B (live only): wait for it.
                wait_until(lambda: backends(url, "subscribe") >= 1, 30, "B's subscription")
                conversation.run(wait=False)  # runs in A; B only streams
                for frame in frames:
                    seen.append((time.monotonic(), frame))
                    if getattr(frame, "type", None) == "run_finished":
                        break
                watchdog.cancel()
                subscription.close()
        finally:
            server_a.stop()
            server_b.stop()
        outputs = [(at, frame) for at, frame in seen if isinstance(frame, OutputFrame)]
        assert "".join(frame.text for _, frame in outputs) == "live-42\ndone-2\n"  # once each
        first_at = next(at for at, frame in outputs if "live-42" in frame.text)
        result_at = next(
            at
            for at, frame in seen
            if isinstance(frame, EventFrame) and frame.event["kind"] == "observation"
        )
        assert result_at - first_at > 1.5
        assert_store_audits_clean(url)


@pytest.mark.postgres
def test_the_relay_sender_ends_when_output_stops(running_loop):
    with fresh_schema_url("treadle_relay") as url:
        store = open_store(url)
        conversation_id = store.create_conversation().id
        hubs = Hubs(store)
        relay = LiveRelay(store, hubs)
        listener = Listener(loop=running_loop)
        hubs.join(conversation_id, listener)
        threads_before = threading.active_count()
        try:

            def published() -> bool:
                # Frames sent before the hub's subscription LISTENs are lost (live only).
                relay(chunk(conversation_id, 0, "through PostgreSQL"))
                time.sleep(0.05)
                return listener.queue.qsize() > 0

            wait_until(published, 30, "a frame back from NOTIFY")
            assert relay.sending
            waiting = listener.with_transient([listener.queue.get_nowait()])
            assert waiting
            assert all(item is not None and item.seq is None for item in waiting)
            assert '"text": "through PostgreSQL"' in waiting[0].texts[0]
            wait_until(lambda: not relay.sending, 30, "the sender's end")
            wait_until(lambda: threading.active_count() == threads_before, 30, "no thread left")
        finally:
            relay.close()
            hubs.leave(listener)
            store.close()
