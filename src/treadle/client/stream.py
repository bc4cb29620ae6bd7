"""A live subscription that reconnects by itself, with backoff, and resumes from its last seq,
keeping a local, gap-free copy of the conversation's events (it mirrors, never invents)."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection, connect

from treadle.client.http import HttpApi
from treadle.errors import TreadleError
from treadle.events.model import Event, event_from_dict
from treadle.runtime.status import stream_messages
from treadle.store.base import StoredEvent


class StreamGap(TreadleError):
    """The server sent a seq that is not the next one: the mirror would have a hole."""


class EventSubscription:
    """Iterate to get stream messages (``{"type": "event"|"status"|"head"|"run_finished"}``);
    ``events`` is the local copy, by seq. Reconnects on any drop, resuming after ``last_seq``."""

    def __init__(
        self,
        api: HttpApi,
        conversation_id: str,
        after_seq: int = -1,
        *,
        max_backoff_s: float = 5.0,
        connect_timeout_s: float = 10.0,
        events_per_connection: int | None = None,
    ) -> None:
        self.api = api
        self.conversation_id = conversation_id
        self.last_seq = after_seq
        self.events: dict[int, Event] = {}
        self.reconnects = 0
        self.max_backoff_s = max_backoff_s
        self.connect_timeout_s = connect_timeout_s
        self.events_per_connection = events_per_connection
        """Ask the server to close each connection after this many events (paced reading)."""
        self._socket: ClientConnection | None = None
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        failures = 0
        while not self._closed.is_set():
            try:
                socket = self._connect()
                failures = 0
                for raw in socket:
                    frame = json.loads(raw)  # one message, or (batch) a list of them
                    for message in frame if isinstance(frame, list) else (frame,):
                        # Follow-up messages (status, head, run_finished) are derived here
                        # from each new event, so a drop between an event and them loses none.
                        if message["type"] == "event" and self._accept(message):
                            stored = StoredEvent(message["seq"], self.events[message["seq"]])
                            yield from stream_messages(stored)
            except (ConnectionClosed, OSError, TimeoutError, InvalidStatus, WebSocketException):
                pass
            finally:
                self._drop()
            if self._closed.is_set():
                return
            failures += 1
            self.reconnects += 1
            # Exponential backoff with jitter; the first retry is immediate.
            delay = 0.0 if failures == 1 else min(self.max_backoff_s, 0.05 * 2**failures)
            time.sleep(delay * (0.5 + random.random() / 2))

    def messages_until(self, predicate, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Consume messages until ``predicate(message)`` holds (or time out)."""
        deadline = time.monotonic() + timeout_s
        seen = []
        timer = threading.Timer(timeout_s, self.close)
        timer.start()
        try:
            for message in self:
                seen.append(message)
                if predicate(message):
                    return seen
        finally:
            timer.cancel()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no matching message within {timeout_s} s")
        return seen

    def drop_connection(self) -> None:
        """Cut the current socket (as a network failure would); iteration reconnects."""
        socket = self._socket
        if socket is not None:
            socket.close()

    def close(self) -> None:
        self._closed.set()
        self.drop_connection()

    def _connect(self) -> ClientConnection:
        query = f"after_seq={self.last_seq}&batch=true"
        if self.events_per_connection:
            query += f"&limit={self.events_per_connection}"
        url = self.api.ws_url(f"/api/conversations/{self.conversation_id}/events/stream?{query}")
        headers = {"Authorization": f"Bearer {self.api.api_key}"} if self.api.api_key else None
        self._socket = connect(
            url,
            additional_headers=headers,
            open_timeout=self.connect_timeout_s,
            max_size=2**26,
            legacy=True,  # a long-lived socket iterated by this object, not a with-block
        )
        return self._socket

    def _drop(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            socket.close()

    def _accept(self, message: dict[str, Any]) -> bool:
        """Keep a new event in the mirror; False for one already seen (after a reconnect)."""
        seq = message["seq"]
        if seq <= self.last_seq:
            return False
        if seq != self.last_seq + 1:
            raise StreamGap(f"expected seq {self.last_seq + 1}, got {seq}")
        self.events[seq] = event_from_dict(message["event"])
        self.last_seq = seq
        return True
