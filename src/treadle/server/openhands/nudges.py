"""Wake-ups for the OpenHands sockets of a conversation: "send ``full_state`` now" (see
``routes_socket``: the end of a run the client polls for).

A ``full_state`` is the SDK client's sign that the run it waits for has ended, so a socket
is nudged only while a run an SDK client started may have ended unseen: from the start of that
run until the client's next request that changes the conversation (a message, a pause, a
policy, …; it has stopped waiting then). A nudge for a ``GET`` made outside such a wait (e.g.
``refresh_from_server``) could reach the client after it started its next run and end that
run's wait at once.
"""

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
        self._awaited: set[str] = set()
        """Conversations whose SDK run may have ended without its client seeing it."""

    def run_started(self, conversation_id: str) -> None:
        """An SDK client started a run: its end may be nudged from now on."""
        with self._lock:
            self._awaited.add(conversation_id)

    def settled(self, conversation_id: str) -> None:
        """The client changes the conversation: it no longer waits for a run's end."""
        with self._lock:
            self._awaited.discard(conversation_id)

    def awaited(self, conversation_id: str) -> bool:
        """Whether a nudge may be sent (an SDK run's end may have gone unseen)."""
        with self._lock:
            return conversation_id in self._awaited

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
        """Hand ``what`` to every socket of the conversation (any thread); a ``NUDGE`` only
        while a run's end is awaited."""
        with self._lock:
            if what is NUDGE and conversation_id not in self._awaited:
                return
            listeners = list(self._listeners.get(conversation_id, ()))
        for listener in listeners:
            with contextlib.suppress(RuntimeError):  # its loop has closed: it is going
                listener.loop.call_soon_threadsafe(listener.queue.put_nowait, what)
