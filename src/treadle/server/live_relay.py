"""How live output from a run in this server process reaches the stream's clients: straight to
this process's hubs, or, on a store shared by several processes (PostgreSQL), through it.

With PostgreSQL any server process may hold a client's stream while another runs the
conversation, so a frame is published on the conversation's notification channel (bounded
payload) and every process following that conversation, this one included, hands it to its
clients (``Hubs`` subscribe with ``on_live``): one path, no duplicate. Publishing is store I/O,
so it happens in a sender thread of the relay, never in the tool's: frames wait in a bounded
queue (the oldest dropped when it is full) and the thread ends once nothing has come for
``IDLE_S``, so a finished run leaves no thread behind. When a call ends its output's last
frames are sent before its result is stored (``flush``, bounded by ``FLUSH_S``): a client that
follows the stream sees a call's output whole before the call's observation.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Generator
from typing import Any, Protocol, runtime_checkable

from treadle.runtime.live_output import OutputChunk
from treadle.store.base import StoredEvent

logger = logging.getLogger(__name__)

QUEUE_FRAMES = 256
"""Frames waiting to be published at most; beyond, the oldest is dropped (live only)."""
IDLE_S = 0.5
"""How long the sender thread waits for another frame before it ends."""
FLUSH_S = 2.0
"""How long the end of a call waits at most for its frames to be published."""


@runtime_checkable
class LiveChannel(Protocol):
    """A store that carries live frames between processes (``PostgresEventStore``)."""

    def publish_live(self, conversation_id: str, frame: dict[str, Any]) -> None: ...

    def subscribe(
        self,
        conversation_id: str,
        after_seq: int = -1,
        *,
        poll_interval: float = 0.05,
        stop: threading.Event | None = None,
        on_live: Callable[[dict[str, Any]], None] | None = None,
    ) -> Generator[StoredEvent, None, None]: ...


class LiveRelay:
    """The ``OutputListener`` a server gives the conversations it runs (``RunManager``)."""

    def __init__(self, store: object, hubs: Any) -> None:
        self.hubs = hubs
        self.channel = store if isinstance(store, LiveChannel) else None
        self.dropped = 0
        """Frames dropped because the channel was slower than the output."""
        self._waiting: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._lock = threading.Condition()
        self._sender: threading.Thread | None = None
        self._closed = False
        self._failing = False
        self._publishing = False

    def __call__(self, chunk: OutputChunk) -> None:
        frame = chunk.frame()
        if self.channel is None:
            self.hubs.publish_transient(chunk.conversation_id, frame)
            return
        with self._lock:
            if self._closed:
                return
            if len(self._waiting) >= QUEUE_FRAMES:
                self._waiting.popleft()
                self.dropped += 1
            self._waiting.append((chunk.conversation_id, frame))
            if self._sender is None:
                self._sender = threading.Thread(
                    target=self._send, name="treadle-live-relay", daemon=True
                )
                self._sender.start()
            self._lock.notify_all()

    def flush(self, timeout_s: float = FLUSH_S) -> None:
        """Wait until every frame queued so far is published (or dropped), ``timeout_s`` at most:
        the end of a call (``CallOutput.close``) calls it before the call's result is stored."""
        with self._lock:
            self._lock.wait_for(
                lambda: self._closed or not (self._waiting or self._publishing), timeout_s
            )

    @property
    def sending(self) -> bool:
        """Whether its sender thread runs now."""
        with self._lock:
            return self._sender is not None

    def close(self) -> None:
        """Publish nothing more; wait for the sender to end."""
        with self._lock:
            self._closed = True
            self._waiting.clear()
            sender = self._sender
            self._lock.notify_all()
        if sender is not None:
            sender.join(timeout=5)

    def _send(self) -> None:
        assert self.channel is not None
        while True:
            with self._lock:
                if not self._waiting and not self._closed:
                    self._lock.wait(IDLE_S)
                if not self._waiting or self._closed:
                    self._sender = None  # under the lock: the next frame starts a new one
                    return
                conversation_id, frame = self._waiting.popleft()
                self._publishing = True
            try:
                self.channel.publish_live(conversation_id, frame)
                self._failing = False
            except Exception as error:  # the store is out: live output is lost, runs go on
                self.dropped += 1
                if not self._failing:  # once per outage, not once per frame
                    logger.warning("live output not published (%s): dropped until it is", error)
                self._failing = True
            finally:
                with self._lock:
                    self._publishing = False
                    self._lock.notify_all()
