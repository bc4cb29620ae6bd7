"""The live event stream: one store subscription per conversation fanned out to every socket.

Joining is atomic with the fan-out: under the hub's lock a client learns the last seq the hub
delivered and is added to it, then replays the store up to that seq. So a client that
reconnects with its last seq gets every later event exactly once: no gap, no duplicate.
Every stream message is derived from a stored event (``runtime.status.stream_messages``), so
a replay reproduces them all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from dataclasses import dataclass, field

from treadle.runtime.status import stream_messages
from treadle.store.base import EventStore, StoredEvent

logger = logging.getLogger(__name__)

MAX_BACKLOG = 10_000
"""Messages a slow client may fall behind before it is dropped (it reconnects and replays)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event for every listener, its stream messages serialised once (not per socket)."""

    seq: int
    texts: tuple[str, ...]

    @classmethod
    def of(cls, stored: StoredEvent) -> Delivery:
        return cls(stored.seq, tuple(json.dumps(m) for m in stream_messages(stored)))


@dataclass(eq=False)
class Listener:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Delivery | None] = field(default_factory=asyncio.Queue)
    dropped: bool = False
    disconnected: bool = False


class ConversationHub:
    """Follows one conversation in the store and hands each new event to every listener."""

    def __init__(self, store: EventStore, conversation_id: str) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.last_seq = store.get_conversation(conversation_id).event_count - 1
        self._listeners: set[Listener] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._follow, name=f"treadle-hub-{conversation_id[:8]}", daemon=True
        )
        self._thread.start()

    def join(self, listener: Listener) -> int:
        """Add ``listener``; returns the last seq it will NOT receive live (replay up to it)."""
        with self._lock:
            self._listeners.add(listener)
            return self.last_seq

    def leave(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.discard(listener)

    def _follow(self) -> None:
        try:
            for stored in self.store.subscribe(self.conversation_id, self.last_seq):
                delivery = Delivery.of(stored)
                with self._lock:
                    self.last_seq = stored.seq
                    for listener in list(self._listeners):
                        self._hand(listener, delivery)
        except Exception:
            logger.exception("stream of %s stopped", self.conversation_id)
        with self._lock:  # the conversation is gone or the store closed: end every stream
            for listener in self._listeners:
                listener.loop.call_soon_threadsafe(listener.queue.put_nowait, None)

    def _hand(self, listener: Listener, delivery: Delivery) -> None:
        if listener.dropped:
            return
        if listener.queue.qsize() > MAX_BACKLOG:
            listener.dropped = True
            item: Delivery | None = None
        else:
            item = delivery
        try:
            listener.loop.call_soon_threadsafe(listener.queue.put_nowait, item)
        except RuntimeError:  # the client's loop is closed: it has gone
            self._listeners.discard(listener)


class Hubs:
    """One hub per conversation streamed by this server process."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._hubs: dict[str, ConversationHub] = {}
        self._lock = threading.Lock()

    def hub(self, conversation_id: str) -> ConversationHub:
        with self._lock:
            hub = self._hubs.get(conversation_id)
            if hub is None or not hub._thread.is_alive():
                hub = self._hubs[conversation_id] = ConversationHub(self.store, conversation_id)
            return hub
