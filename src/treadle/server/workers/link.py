"""HTTP/1.1 from the front to one worker over its unix socket (h11): the client's request
target and headers sent as they came (no URL normalisation on the way), bodies streamed both
ways, idle connections kept for the next request and dropped when a worker is replaced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import h11

IDLE_KEEP_S = 20.0
"""An idle connection older than this is not reused (the worker keeps them for 60 s)."""
READ_BYTES = 65536
IDLE_MOST = 32
"""Idle connections kept per worker; more are closed (after a burst, the oldest go first)."""


class WorkerDown(Exception):
    """The worker could not be reached, or it went away before answering."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = time.monotonic()

    async def send(self, event: h11.Event) -> None:
        data = self.h11.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def next_event(self) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.h11.receive_data(await self.reader.read(READ_BYTES))

    def close(self) -> None:
        self.writer.close()


@dataclass
class Answer:
    """A worker's response: its head now, its body as it comes (``body``), then ``done``."""

    status: int
    headers: list[tuple[bytes, bytes]]
    _link: Link
    _connection: _Connection

    async def body(self) -> AsyncIterator[bytes]:
        try:
            while True:
                event = await self._connection.next_event()
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self._link._give_back(self._connection)
                    return
                else:
                    raise WorkerDown(f"the worker's answer broke off ({type(event).__name__})")
        except (OSError, h11.ProtocolError) as error:
            self._connection.close()
            raise WorkerDown(f"the worker's answer broke off: {error}") from None
        except BaseException:
            self._connection.close()  # the client went away: this connection is mid-answer
            raise

    def discard(self) -> None:
        self._connection.close()


class Link:
    def __init__(self, path: str) -> None:
        self.path = path
        self._idle: list[_Connection] = []

    async def _connection(self) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while self._idle:
            found = self._idle.pop()
            if now - found.idle_since < IDLE_KEEP_S and not found.reader.at_eof():
                return found, True
            found.close()
        try:
            reader, writer = await asyncio.open_unix_connection(self.path, limit=READ_BYTES)
        except OSError as error:
            raise WorkerDown(f"cannot reach the worker: {error}") from None
        return _Connection(reader, writer), False

    def _give_back(self, connection: _Connection) -> None:
        if connection.h11.our_state is h11.DONE and connection.h11.their_state is h11.DONE:
            connection.h11.start_next_cycle()
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
            if len(self._idle) > IDLE_MOST:
                self._idle.pop(0).close()
        else:
            connection.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def request(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterator[bytes] | bytes,
    ) -> Answer:
        """Send the request, body and all, and read the answer's head. ``WorkerDown`` when
        nothing came back (a reused connection the worker had closed is retried once, before
        any body was read)."""
        for attempt in range(2):
            connection, reused = await self._connection()
            try:
                await connection.send(h11.Request(method=method, target=target, headers=headers))
            except (OSError, h11.LocalProtocolError) as error:
                connection.close()
                if reused and attempt == 0:
                    continue
                raise WorkerDown(f"cannot send to the worker: {error}") from None
            break
        try:
            await self._send_body(connection, body)
            while True:
                event = await connection.next_event()
                if isinstance(event, h11.InformationalResponse):
                    continue
                if isinstance(event, h11.Response):
                    return Answer(event.status_code, list(event.headers), self, connection)
                raise WorkerDown("the worker closed the connection without answering")
        except (OSError, h11.ProtocolError) as error:
            connection.close()
            raise WorkerDown(f"the worker went away: {error}") from None
        except BaseException:
            connection.close()
            raise

    async def _send_body(self, connection: _Connection, body: AsyncIterator[bytes] | bytes) -> None:
        try:
            if isinstance(body, bytes):
                if body:
                    await connection.send(h11.Data(data=body))
            else:
                async for chunk in body:
                    if chunk:
                        await connection.send(h11.Data(data=chunk))
            await connection.send(h11.EndOfMessage())
        except OSError:
            pass  # the worker answered early (a refusal) and closed: read that answer
