"""Wake-ups for the OpenHands sockets of a conversation: "send ``full_state`` now" (see
``routes_socket``: the end of a run the client polls for)."""

from __future__ import annotations

import contextlib
import threading

from treadle.server.stream import Delivery, Listener

NUDGE = Delivery(None, ("nudge",))
"""Queued for a listener: send ``full_state`` if nothing runs the conversation."""
RUN_ENDED = Delivery(None, ("run ended",))
"""Queued for a listener: a run started by an SDK client ended, send ``full_state``."""


class Nudges:
    """The OpenHands sockets open in this process, by conversation."""

    def __init__(self) -> None:
        self._listeners: dict[str, set[Listener]] = {}
        self._lock = threading.Lock()

    def add(self, conversation_id: str, listener: Listener) -> None:
        with self._lock:
            self._listeners.setdefault(conversation_id, set()).add(listener)

    def remove(self, conversation_id: str, listener: Listener) -> None:
        with self._lock:
            found = self._listeners.get(conversation_id)
            if found is not None:
                found.discard(listener)
                if not found:
                    del self._listeners[conversation_id]

    def say(self, conversation_id: str, text: str) -> None:
        """Send ``text`` (a state update not stored) on every socket of the conversation."""
        self.nudge(conversation_id, Delivery(None, (text,)))

    def nudge(self, conversation_id: str, what: Delivery = NUDGE) -> None:
        """Hand ``what`` to every socket of the conversation (any thread)."""
        with self._lock:
            listeners = list(self._listeners.get(conversation_id, ()))
        for listener in listeners:
            with contextlib.suppress(RuntimeError):  # its loop has closed: it is going
                listener.loop.call_soon_threadsafe(listener.queue.put_nowait, what)
