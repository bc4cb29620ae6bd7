"""The live event stream: one store subscription per conversation fanned out to every socket.

Joining is atomic with the fan-out: under the hub's lock a client learns the last seq the hub
delivered and is added to it, then replays the store up to that seq. So a client that
reconnects with its last seq gets every later event exactly once: no gap, no duplicate.
Every frame is made from a stored event and the state before it (``runtime.status.StreamState``,
seeded from the log up to where a reader starts), so a replay reproduces live frames exactly
(docs/stream.md). The event's stored JSON is sent as it is, never decoded and re-encoded. A hub lives while it has listeners: its thread and its store
subscription (a connection) end when the last one leaves, so streams opened and closed leave
nothing behind. Transient frames (a command's output so far) wait apart, a bounded number per
client with the oldest dropped, so live output never holds up a run nor ends a stream.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from treadle.events.model import EVENT_KINDS, event_to_json
from treadle.events.usage import USAGE_KINDS, UsageTotals, usage_of
from treadle.runtime.isolation import count_unsandboxed
from treadle.runtime.status import StreamState, read_status
from treadle.server.live_relay import LiveChannel
from treadle.store.base import EventQuery, EventStore, StoredEvent
from treadle.store.usage_totals import USAGE_TEXT

logger = logging.getLogger(__name__)

MAX_BACKLOG = 10_000
"""Messages a slow client may fall behind before it is dropped (it reconnects and replays)."""
TRANSIENT_BACKLOG = 256
"""Transient frames waiting for one client at most; beyond, the oldest is dropped: live output
never makes a client fall behind its stored events, and the publisher never waits for it."""
SEED_WINDOW = 1000
"""Events a stream's state is seeded from (the rest of the log is summed up by look-ups)."""
_HEAD_KINDS = [kind for kind in EVENT_KINDS if kind != "state_change"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event's frames for every listener, serialised once (not per socket); a transient
    delivery (``seq`` None) is live only: never counted by ``limit`` nor replayed."""

    seq: int | None
    texts: tuple[str, ...]

    @classmethod
    def of(cls, stored: StoredEvent, state: StreamState) -> Delivery:
        """The frames of ``stored``, the next event after what ``state`` has seen."""
        return cls(stored.seq, frame_texts(stored, state))

    @classmethod
    def transient(cls, frame: dict[str, Any]) -> Delivery:
        return cls(None, (json.dumps({**frame, "stored": False}),))


TRANSIENT_READY = Delivery(None, ())
"""Queued for a listener when transient frames wait for it (``Listener.with_transient``)."""


def frame_texts(stored: StoredEvent, state: StreamState) -> tuple[str, ...]:
    """The ``event`` frame of ``stored`` (and ``run_finished`` after a run's last event),
    advancing ``state``. The event goes in as the store holds its JSON (no re-encoding)."""
    facts = state.advance(stored.event, stored.seq)
    payload = stored.payload if stored.payload is not None else event_to_json(stored.event)
    run_finished = facts.pop("run_finished")

    text = json.dumps(facts, separators=(",", ":"))
    event = f'{{"type":"event","seq":{stored.seq},"event":{payload},{text[1:]}'
    if not run_finished:
        return (event,)
    status = facts["status"]
    finished = {"type": "run_finished", "seq": stored.seq, **status}
    return (event, json.dumps(finished, separators=(",", ":")))


def seeded_state(store: EventStore, conversation_id: str, up_to: int) -> StreamState:
    """The stream's state after the events up to seq ``up_to``: what a frame after it must
    say. Reads at most ``SEED_WINDOW`` events: the status and head before them come from two
    indexed look-ups, so seeding costs the same at 1,000 events as at 1,000,000; the links
    come from the window (docs/stream.md, a call left open longer than that is not linked);
    the usage totals from the conversation's row (``_usage_up_to``); the transcript's items
    from the window (``events.view.TranscriptFollower``)."""
    state = StreamState()
    if up_to < 0:
        return state
    start = max(0, up_to + 1 - SEED_WINDOW)
    window: list[StoredEvent] = []
    while len(window) < up_to + 1 - start:
        page = store.get_range(conversation_id, start + len(window), up_to + 1)
        if not page:
            break
        window.extend(page)
    if start > 0:
        status, reason = read_status(store, conversation_id, before_seq=start)
        state.start_from(status, reason, _head_before(store, conversation_id, start))
        state.unsandboxed_runs = count_unsandboxed(store, conversation_id, before_seq=start)
    for stored in window:
        state.advance(stored.event, stored.seq)
    state.usage = _usage_up_to(store, conversation_id, up_to)
    return state


def _usage_up_to(store: EventStore, conversation_id: str, up_to: int) -> UsageTotals:
    """The usage totals of the events up to seq ``up_to``: the conversation's, as the store
    keeps them at append time, less those of the events after it (read with the same row, so
    an append meanwhile changes nothing; none at the end of the log, where a live stream
    starts)."""
    info = store.get_conversation(conversation_id)
    prompt, completion, cost = info.prompt_tokens, info.completion_tokens, info.cost_usd
    after: int | None = up_to
    while after is not None and after < info.event_count - 1:
        query = EventQuery(
            kinds=USAGE_KINDS,
            text=USAGE_TEXT,
            after_seq=after,
            before_seq=info.event_count,
            limit=500,
        )
        page = store.search(conversation_id, query)
        for stored in page.items:
            if (usage := usage_of(stored.event)) is not None:
                prompt -= usage.prompt_tokens
                completion -= usage.completion_tokens
                cost -= usage.cost_usd
        after = page.next_cursor
    return UsageTotals(prompt, completion, max(cost, 0.0))


def _head_before(store: EventStore, conversation_id: str, before_seq: int) -> str | None:
    """The head as it stood before ``before_seq``: the last event that is not a state
    change, unless a head move came after it."""
    query = EventQuery(kinds=_HEAD_KINDS, order="desc", limit=1, before_seq=before_seq)
    last = store.search(conversation_id, query).items
    after = last[0].seq if last else -1
    moves = EventQuery(
        kinds=["state_change"],
        text='"key":"head"',
        order="desc",
        limit=1,
        before_seq=before_seq,
        after_seq=after,
    )
    for stored in store.search(conversation_id, moves).items:
        head = StreamState()
        head.advance(stored.event)
        if head.head is not None:
            return head.head
    return last[0].event.id if last else None


@dataclass(eq=False)
class Listener:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Delivery | None] = field(default_factory=asyncio.Queue)
    dropped: bool = False
    transient: collections.deque[Delivery] = field(
        default_factory=lambda: collections.deque(maxlen=TRANSIENT_BACKLOG)
    )
    """Transient frames waiting for this client, apart from its queue (bounded, drop-oldest);
    one ``TRANSIENT_READY`` in the queue says some wait."""
    transient_dropped: int = 0
    """Transient frames dropped because this client was behind (docs/stream.md)."""
    wake_pending: bool = False
    """A ``TRANSIENT_READY`` is on its way to the queue (one wake-up for many frames)."""
    disconnected: bool = False
    hub: ConversationHub | None = None
    """The hub it joined (set by ``Hubs.join``; ``Hubs.leave`` takes it out again)."""

    def with_transient(self, waiting: list[Delivery | None]) -> list[Delivery | None]:
        """``waiting`` (taken from the queue) with each ``TRANSIENT_READY`` replaced by the
        transient frames that wait now, in the order they came."""
        if TRANSIENT_READY not in waiting:
            return waiting
        self.wake_pending = False  # before draining: a frame added meanwhile wakes again
        taken: list[Delivery | None] = []
        while self.transient:
            taken.append(self.transient.popleft())
        out: list[Delivery | None] = []
        for item in waiting:
            if item is TRANSIENT_READY:
                out += taken
                taken = []
            else:
                out.append(item)
        return out

    def end(self) -> bool:
        """Queue the end of the stream from another thread; False when the client's loop has
        closed (the client is gone)."""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, None)
        except RuntimeError:
            return False
        return True


class ConversationHub:
    """Follows one conversation in the store and hands each new event to every listener.

    Lives while it has listeners: when the last one leaves it stops following, and its thread
    ends and frees its store connection within the store's poll interval. A hub that is
    stopping takes no new listener (``join`` answers None): the caller makes a fresh hub.
    """

    def __init__(self, store: EventStore, conversation_id: str) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.last_seq = store.event_count(conversation_id) - 1
        self.error: Exception | None = None
        """Why the subscription failed, when it did (the stream ends with that reason)."""
        self.ended = False
        self._stop = threading.Event()
        self._listeners: set[Listener] = set()
        self._lock = threading.Lock()
        # Subscribed here, in the caller's thread: a missing conversation or an unreachable
        # store fails the join that asked for this hub, and the hub's thread never needs a
        # per-thread store connection of its own.
        self._state = seeded_state(store, conversation_id, self.last_seq)
        # A store shared by processes also brings the live frames of a run in any of them.
        self._events = (
            _subscribe_with_live(store, conversation_id, self.last_seq, self._stop, self)
            if isinstance(store, LiveChannel)
            else store.subscribe(conversation_id, self.last_seq, stop=self._stop)
        )
        self._thread = threading.Thread(
            target=self._follow, name=f"treadle-hub-{conversation_id[:8]}", daemon=True
        )

    @property
    def stopping(self) -> bool:
        """Its last listener has left: it follows no more and takes no new listener."""
        return self._stop.is_set()

    @property
    def listener_count(self) -> int:
        with self._lock:
            return len(self._listeners)

    def start(self) -> None:
        self._thread.start()

    def discard(self) -> None:
        """Drop a hub that was never started (another join made one first)."""
        self._events.close()

    def join(self, listener: Listener) -> int | None:
        """Add ``listener``; returns the last seq it will NOT receive live (replay up to it),
        or None when this hub is stopping. A listener that joins an ended hub is ended."""
        with self._lock:
            if self._stop.is_set():
                return None
            self._listeners.add(listener)
            if self.ended:
                listener.end()
            return self.last_seq

    def leave(self, listener: Listener) -> bool:
        """Remove ``listener``; True when it was the last one (the hub then stops)."""
        with self._lock:
            self._listeners.discard(listener)
            if self._listeners:
                return False
            self._stop.set()
            return True

    def publish_transient(self, frame: dict[str, Any]) -> None:
        """Hand a transient frame (not stored) to every listener now; late joiners miss it."""
        delivery = Delivery.transient(frame)
        with self._lock:
            for listener in list(self._listeners):
                self._hand(listener, delivery)

    def _follow(self) -> None:
        try:
            for stored in self._events:
                delivery = Delivery.of(stored, self._state)
                with self._lock:
                    self.last_seq = stored.seq
                    for listener in list(self._listeners):
                        self._hand(listener, delivery)
        except Exception as error:
            self.error = error
            logger.exception("stream of %s stopped", self.conversation_id)
        finally:
            self._events.close()  # frees the subscription's connection if it is still open
        with self._lock:  # the conversation is gone, the store closed or failed: end streams
            self.ended = True
            for listener in self._listeners:
                listener.end()

    def _hand(self, listener: Listener, delivery: Delivery) -> None:
        if listener.dropped:
            return
        if delivery.seq is None:
            self._hand_transient(listener, delivery)
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
            if not self._listeners:
                self._stop.set()

    def _hand_transient(self, listener: Listener, delivery: Delivery) -> None:
        if len(listener.transient) == TRANSIENT_BACKLOG:
            listener.transient_dropped += 1  # the oldest goes: live only, never waited for
        listener.transient.append(delivery)
        if listener.wake_pending:
            return
        listener.wake_pending = True
        try:
            listener.loop.call_soon_threadsafe(listener.queue.put_nowait, TRANSIENT_READY)
        except RuntimeError:  # the client's loop is closed: it has gone
            self._listeners.discard(listener)
            if not self._listeners:
                self._stop.set()


def _subscribe_with_live(
    channel: LiveChannel,
    conversation_id: str,
    after_seq: int,
    stop: threading.Event,
    hub: ConversationHub,
) -> Generator[StoredEvent, None, None]:
    """A subscription that also hands ``hub`` the live frames any process publishes."""
    return channel.subscribe(conversation_id, after_seq, stop=stop, on_live=hub.publish_transient)


class Hubs:
    """The hubs of the conversations this server process streams now: one per conversation
    with listeners, removed (and stopped) when its last listener leaves."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._hubs: dict[str, ConversationHub] = {}
        self._lock = threading.Lock()

    def join(self, conversation_id: str, listener: Listener) -> int:
        """Add ``listener`` to the conversation's hub (``listener.hub``); returns the last seq
        it will not receive live. Does store I/O when a hub must be made: call it off the
        event loop. Raises the store's error (ConversationNotFound, StoreError) when no hub
        can be made."""
        if (last_seq := self._join_live(conversation_id, listener)) is not None:
            return last_seq
        fresh = ConversationHub(self.store, conversation_id)  # store I/O: outside the lock
        with self._lock:
            if (last_seq := self._join_live(conversation_id, listener, locked=True)) is not None:
                fresh.discard()  # another join made one meanwhile
                return last_seq
            self._hubs[conversation_id] = fresh
            fresh.start()
            last_seq = fresh.join(listener)
        assert last_seq is not None  # nothing stops a hub before its first listener leaves
        listener.hub = fresh
        return last_seq

    def _join_live(
        self, conversation_id: str, listener: Listener, *, locked: bool = False
    ) -> int | None:
        with contextlib.nullcontext() if locked else self._lock:
            hub = self._hubs.get(conversation_id)
            if hub is None or hub.ended:
                return None
            last_seq = hub.join(listener)  # None when it is stopping: its last listener left
            if last_seq is not None:
                listener.hub = hub
            return last_seq

    def listeners(self, conversation_id: str) -> int:
        """How many streams of the conversation this process serves now."""
        with self._lock:
            hub = self._hubs.get(conversation_id)
        return 0 if hub is None else hub.listener_count

    def publish_transient(self, conversation_id: str, frame: dict[str, Any]) -> None:
        """Hand a transient frame to the conversation's listeners in this process, if any.
        Never blocks: any thread may call it."""
        with self._lock:
            hub = self._hubs.get(conversation_id)
        if hub is not None:
            hub.publish_transient(frame)

    def leave(self, listener: Listener) -> None:
        """Take ``listener`` out of its hub; the last one out stops the hub and drops it."""
        hub, listener.hub = listener.hub, None
        if hub is None:
            return
        with self._lock:
            if hub.leave(listener) and self._hubs.get(hub.conversation_id) is hub:
                del self._hubs[hub.conversation_id]
