"""A live subscription that reconnects by itself, with bounded backoff, and resumes from its
last seq, keeping a local, gap-free copy of the conversation's events (it mirrors, never
invents); a close code that says "do not retry" ends it with a typed error."""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import ValidationError
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

from treadle.api.stream import OutputFrame, StreamFrame, is_transient, typed_frame
from treadle.client.http import HttpApi
from treadle.errors import TreadleError
from treadle.events.model import Event, event_from_dict


class StreamGap(TreadleError):
    """The server sent a seq that is not the next one: the mirror would have a hole."""


class StreamClosed(TreadleError):
    """The stream ended for good: ``code`` is the server's close code (a refused handshake
    counts as 4000 + its HTTP status, the server's own convention) and ``reason`` its reason."""

    def __init__(self, message: str, code: int | None, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(message)


class StreamRefused(StreamClosed):
    """The server closed with a code that means "do not retry": 4400 bad parameter (e.g.
    ``after_seq``), 4401/4403 key or Host/Origin refused, 4404 no such conversation."""


class StreamUnavailable(StreamClosed):
    """Reconnecting failed ``max_retries`` times in a row, or for ``retry_deadline_s``
    (store unavailable 1013, server error 1011, network failures...): given up."""


RETRY_LATER = frozenset({4408, 4429})
"""4400-4499 mirror HTTP 4xx; these two say "reconnect" and "later", not "never"."""
FINAL_PROTOCOL_CODES = frozenset({1002, 1003, 1007, 1008, 1009, 1010})
"""Protocol, data, policy and size failures: trying again would fail the same way."""
LIVE_OUTPUT_CHARS = 65_536
"""Characters of a running call's output a subscription keeps (the newest)."""
HEALTHY_CONNECTION_S = 30.0
"""A connection open this long counts as working even if no event came (an idle stream)."""


def is_final(code: int | None) -> bool:
    """Whether a close code says that reconnecting cannot help."""
    if code is None:
        return False
    return code in FINAL_PROTOCOL_CODES or (4400 <= code <= 4499 and code not in RETRY_LATER)


class EventSubscription:
    """Iterate to get the stream's frames (docs/stream.md: ``event`` with the status, head and
    usage totals after it, ``run_finished``, transient ones); ``events`` is the local copy, by
    seq, and ``status``/``head``/``usage`` the last event frame's. Reconnects after a drop,
    resuming after ``last_seq``: at once after a connection that delivered events, then with exponential
    backoff (up to ``max_backoff_s``). Raises ``StreamRefused`` on a final close code, and
    ``StreamUnavailable`` after ``max_retries`` failed attempts in a row or
    ``retry_deadline_s`` seconds of failing (None: no bound). ``last_close`` holds the code
    and reason of the last connection's end."""

    def __init__(
        self,
        api: HttpApi,
        conversation_id: str,
        after_seq: int = -1,
        *,
        max_backoff_s: float = 5.0,
        connect_timeout_s: float = 10.0,
        events_per_connection: int | None = None,
        max_retries: int | None = 20,
        retry_deadline_s: float | None = 120.0,
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
        self.max_retries = max_retries
        self.retry_deadline_s = retry_deadline_s
        self.last_close: tuple[int | None, str] = (None, "")
        self.status: dict[str, Any] | None = None
        """``{status, reason}`` after the last event taken, as the server sent it."""
        self.head: str | None = None
        """The head after the last event taken, as the server sent it."""
        self.usage: dict[str, Any] | None = None
        """``{prompt_tokens, completion_tokens, cost_usd}`` of every model call up to the last
        event taken, as the server sent them."""
        self.live_output: dict[str, str] = {}
        """Output so far of the calls in progress, by action id (its newest
        ``LIVE_OUTPUT_CHARS``; ``[... N characters not received ...]`` where frames were
        missed), dropped when the call's result is taken: never stored, never replayed."""
        self._live_ends: dict[str, int] = {}
        self._finished_seq: int | None = None
        self._socket: ClientConnection | None = None
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        failures = 0
        failing_since = 0.0
        while not self._closed.is_set():
            worked = False
            opened_at = time.monotonic()
            try:
                socket = self._connect()
                opened_at = time.monotonic()
                for raw in socket:
                    worked = True
                    frames = json.loads(raw)  # one frame, or (batch) a list of them
                    for frame in frames if isinstance(frames, list) else (frames,):
                        if self._take(frame):
                            yield frame
                self.last_close = (socket.close_code, socket.close_reason or "")
            except ConnectionClosed as error:
                self.last_close = _close_of(error)
            except InvalidStatus as error:  # the handshake was answered with an HTTP error
                body = error.response.body or b""
                self.last_close = (
                    4000 + error.response.status_code,
                    body[:300].decode("utf-8", errors="replace") or str(error),
                )
            except InvalidURI as error:
                raise StreamRefused(f"bad stream URL: {error}", None, str(error)) from None
            except (OSError, TimeoutError, WebSocketException) as error:
                self.last_close = (None, f"{type(error).__name__}: {error}")
            finally:
                self._drop()
            if self._closed.is_set():
                return
            code, reason = self.last_close
            where = f"the stream of conversation {self.conversation_id}"
            if is_final(code):
                raise StreamRefused(f"{where} was closed with code {code}: {reason}", code, reason)
            if worked or time.monotonic() - opened_at >= HEALTHY_CONNECTION_S:
                failures = 0
            if failures == 0:
                failing_since = time.monotonic()
            failures += 1
            self.reconnects += 1
            self._give_up_if_bounded(failures, failing_since, where)
            # Exponential backoff with jitter; the first retry is immediate.
            delay = 0.0 if failures == 1 else min(self.max_backoff_s, 0.05 * 2**failures)
            self._closed.wait(delay * (0.5 + random.random() / 2))

    def _give_up_if_bounded(self, failures: int, failing_since: float, where: str) -> None:
        """``StreamUnavailable`` once the retries in a row or the time failing are over bound."""
        elapsed = time.monotonic() - failing_since
        over_count = self.max_retries is not None and failures > self.max_retries
        over_time = self.retry_deadline_s is not None and elapsed > self.retry_deadline_s
        if over_count or over_time:
            code, reason = self.last_close
            last = f"code {code}: {reason}" if code is not None else reason
            raise StreamUnavailable(
                f"{where} failed {failures} times in a row over {elapsed:.1f} s; "
                f"gave up (last: {last})",
                code,
                reason,
            )

    def frames(self) -> Iterator[StreamFrame]:
        """The frames as their models (``treadle.api.stream``): ``EventFrame``,
        ``RunFinishedFrame``, ``OutputFrame``, or a ``TransientFrame`` of another type."""
        for frame in self:
            yield typed_frame(frame)

    def messages_until(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 60.0
    ) -> list[dict[str, Any]]:
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
        if self.api.api_key:
            # Also as the first message: a key the server refuses then gets 4401 at once
            # (a server that took the header's key ignores it).
            self._socket.send(json.dumps({"api_key": self.api.api_key}))
        return self._socket

    def _drop(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            socket.close()

    def _take(self, frame: dict[str, Any]) -> bool:
        """Mirror a frame; False for one to skip (an event already seen after a reconnect,
        a run_finished whose event was not taken here). Status, head and usage are the
        frame's, as the server computed them: never derived here."""
        kind = frame.get("type")
        if is_transient(frame):
            if kind == "output":
                with contextlib.suppress(ValidationError):  # a shape it does not know: passed on
                    self._take_output(OutputFrame.model_validate(frame))
            return True  # live only: no seq, no gap
        seq = frame.get("seq")
        if kind == "run_finished":
            # With batch=true the server sends it in the same message as its event, so a
            # drop cannot separate them: it follows the event this stream took last.
            return seq == self.last_seq and seq != self._finished_seq and self._note_end(seq)
        if kind != "event":
            return True  # a frame kind this client does not know: passed on as it is
        if not isinstance(seq, int):  # a stored event always has one (docs/stream.md)
            raise StreamGap(f"an event frame without an integer seq (got {seq!r})")
        if seq <= self.last_seq:
            return False
        if seq != self.last_seq + 1:
            raise StreamGap(f"expected seq {self.last_seq + 1}, got {seq}")
        self.events[seq] = event_from_dict(frame["event"])
        if frame.get("answers"):  # the stored result replaces the output so far
            self.live_output.pop(frame["answers"], None)
            self._live_ends.pop(frame["answers"], None)
        self.last_seq = seq
        self.status = frame["status"]
        self.head = frame["head"]
        self.usage = frame.get("usage")
        return True

    def _take_output(self, frame: OutputFrame) -> None:
        action = frame.action_id
        if action not in self.live_output and len(self.live_output) >= 64:
            oldest = next(iter(self.live_output))  # a call whose result never came here
            self.live_output.pop(oldest)
            self._live_ends.pop(oldest, None)
        so_far = self.live_output.get(action, "")
        end = self._live_ends.get(action, 0)
        if frame.offset > end:
            so_far += f"[... {frame.offset - end} characters not received ...]"
        so_far += frame.text[max(0, end - frame.offset) :]
        self.live_output[action] = so_far[-LIVE_OUTPUT_CHARS:]
        self._live_ends[action] = max(end, frame.offset + len(frame.text))

    def _note_end(self, seq: int) -> bool:
        self._finished_seq = seq
        return True


def _close_of(error: ConnectionClosed) -> tuple[int | None, str]:
    """The code and reason a closed connection ended with: the server's close frame, else
    the one this side sent (e.g. 1009, a frame over ``max_size``), else 1006 (no frame)."""
    frame = error.rcvd or error.sent
    if frame is None:
        return 1006, "the connection was lost without a close frame"
    return frame.code, frame.reason
