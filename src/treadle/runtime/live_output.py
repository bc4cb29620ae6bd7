"""Live output of the calls in progress: what a command printed so far, told to listeners (the
CLI's live view, the server's stream) in bounded, masked chunks while it runs; never stored.

Bounds, per call: at most one chunk every ``MIN_INTERVAL_S`` (the first at once), at most
``MAX_CHUNK_CHARS`` characters in one (older output waiting beyond that is dropped, and the next
chunk's ``offset`` shows the gap). No thread of its own: the tool's reading loop feeds it and
asks when the next chunk is due (``wait_s``). Secrets: a chunk is masked whole, and the end of
the output that could be the start of a secret (any form, broken over lines too) is held back
until the rest of it arrives or the call ends, so no part of a secret reaches a chunk.
"""

from __future__ import annotations

import codecs
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from treadle.events.model import ActionEvent
from treadle.runtime.secrets import Secrets

logger = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.1
"""At most ten chunks a second per call: a chatty command costs bounded frames and redraws."""
MAX_CHUNK_CHARS = 4096
"""Characters one chunk carries at most (the newest; older ones waiting are dropped)."""
OUTPUT_FRAME = "output"
"""The stream's transient frame type for a chunk (docs/stream.md)."""

_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """Output of one call in progress: ``text`` starts ``offset`` characters into what the
    call printed so far (dropped characters counted), so a reader sees a gap as one."""

    conversation_id: str
    action_id: str
    tool_call_id: str
    tool_name: str
    offset: int
    text: str

    def frame(self) -> dict[str, Any]:
        """The stream's transient ``output`` frame (``treadle.api.stream.OutputFrame``)."""
        return {
            "type": OUTPUT_FRAME,
            "stored": False,
            "conversation_id": self.conversation_id,
            "action_id": self.action_id,
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "offset": self.offset,
            "text": self.text,
        }


OutputListener = Callable[[OutputChunk], None]
"""Told of each chunk, in the tool's thread: must not block (queue it, print it, drop it). A
listener that queues may have a ``flush()``: called when a call ends, before its result is
stored, so that what it queued goes out first (bounded by the listener)."""


@dataclass
class LiveOutput:
    """A conversation's listeners for live output. With none, a call streams nothing and
    costs nothing (``open`` answers None)."""

    listeners: list[OutputListener] = field(default_factory=list)

    def open(
        self, conversation_id: str, call: ActionEvent | None, secrets: Secrets
    ) -> CallOutput | None:
        """A feed for ``call``'s output, or None when nobody listens (or no call is known).
        The caller closes it when the call ends."""
        if call is None or not self.listeners:
            return None
        return CallOutput(conversation_id, call, secrets, tuple(self.listeners))


class CallOutput:
    """One call's output as it comes: ``feed`` bytes from the reading loop, ``tick`` when
    ``wait_s`` says a chunk is due, ``close`` at the end (the rest goes out, masked)."""

    def __init__(
        self,
        conversation_id: str,
        call: ActionEvent,
        secrets: Secrets,
        listeners: tuple[OutputListener, ...],
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        max_chunk_chars: int = MAX_CHUNK_CHARS,
    ) -> None:
        self._conversation_id = conversation_id
        self._call = call
        self._secrets = secrets
        self._listeners = listeners
        self._min_interval_s = min_interval_s
        self._max_chars = max_chunk_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._fresh = False
        """Output came since the last chunk (held-back text alone is never due)."""
        self._cut = False
        """The oldest pending output was dropped: ``_pending`` may start inside a secret."""
        self._offset = 0
        self._due = 0.0
        self._closed = False
        self._lock = threading.Lock()
        self.chunks = 0
        """Chunks told so far."""

    def feed(self, data: bytes) -> None:
        """Take more output; a chunk goes out now when one is due."""
        if not data:
            return
        with self._lock:
            if self._closed:
                return
            self._pending += self._decoder.decode(data)
            self._fresh = True
            self._bound_pending()
            if time.monotonic() >= self._due:
                self._flush(final=False)

    def wait_s(self) -> float | None:
        """Seconds until the waiting output is due (None: nothing waits to go out)."""
        if not self._fresh or self._closed:
            return None
        return max(0.0, self._due - time.monotonic())

    def tick(self) -> None:
        """Send what waits if it is due (the reading loop calls this when ``wait_s`` ran out)."""
        with self._lock:
            if self._fresh and not self._closed and time.monotonic() >= self._due:
                self._flush(final=False)

    def close(self) -> None:
        """The call ended: what is left goes out (masked whole); later feeds are ignored."""
        with self._lock:
            if self._closed:
                return
            self._pending += self._decoder.decode(b"", final=True)
            self._bound_pending()
            self._flush(final=True)
            self._closed = True
        for listener in self._listeners:
            flush = getattr(listener, "flush", None)
            if callable(flush):
                try:
                    flush()
                except Exception:  # a listener's failure never fails the call
                    logger.exception("a live output listener failed to flush")

    def _bound_pending(self) -> None:
        # Room for a held-back secret's start beyond the chunk's size: it is never dropped
        # in a way that would let its end out unmasked (``_cut`` masks around the cut).
        keep = self._max_chars + self._secrets_reach()
        excess = len(self._pending) - keep
        if excess > 0:
            self._pending = self._pending[excess:]
            self._offset += excess
            self._cut = True

    def _secrets_reach(self) -> int:
        forms = self._secrets.forms()
        return 3 * max(map(len, forms)) if forms else 0  # a form broken by \r\n everywhere

    def _flush(self, *, final: bool) -> None:
        self._fresh = False
        if not self._pending:
            return
        masked = self._secrets.mask(self._pending)
        held = "" if final else _unfinished_secret(masked, self._pending, self._secrets.forms())
        text = masked[: len(masked) - len(held)]
        if self._cut and text:
            _, text = self._secrets.mask_around_cut("", text)
            self._cut = False
        if len(text) > self._max_chars:  # only the newest fit: the gap shows in the offset
            self._offset += len(text) - self._max_chars
            text = text[-self._max_chars :]
        self._pending = held
        if not text:
            return
        chunk = OutputChunk(
            self._conversation_id,
            self._call.id,
            self._call.tool_call_id,
            self._call.tool_name,
            self._offset,
            text,
        )
        self._offset += len(text)
        self._due = time.monotonic() + self._min_interval_s
        self.chunks += 1
        for listener in self._listeners:
            try:
                listener(chunk)
            except Exception:  # a listener's failure never fails the call
                logger.exception("a live output listener failed")


def _unfinished_secret(masked: str, raw: str, forms: list[str]) -> str:
    """The end of ``masked`` that may be the start of a secret's form (line breaks allowed
    between its characters) and so must wait for more output: "" when none. Only text after
    the last masked secret counts (it is then the raw text itself)."""
    if not forms or not masked:
        return ""
    longest = max(map(len, forms))
    for start in range(max(0, len(masked) - 3 * longest), len(masked)):
        if masked[start] in "\r\n":
            continue
        rest = masked[start:].replace("\r", "").replace("\n", "")
        if len(rest) >= longest:
            continue
        lowered = rest.lower()
        for form in forms:
            if form.startswith(rest) or (_HEX.fullmatch(form) and form.startswith(lowered)):
                tail = masked[start:]
                return tail if raw.endswith(tail) else ""
    return ""
