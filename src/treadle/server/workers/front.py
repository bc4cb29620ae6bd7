"""The front of ``treadle serve --workers N``: an ASGI app (under uvicorn, on the public
socket) that forwards every request to a worker (``routing``), behind the same
``SecurityMiddleware`` a single server has. It reads no body it does not forward as it comes
(only the few ``REROUTABLE`` requests, within --max-body-bytes), keeps no state about
conversations, and answers only ``/health`` itself (200 when every worker is up) and, from
every worker's answers, the one listing no worker holds alone (``fan_out``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.datastructures import Headers
from websockets.exceptions import InvalidHandshake

import treadle
from treadle.server.errors import BodyTooLarge
from treadle.server.workers.fan_out import Reply, bash_events
from treadle.server.workers.link import Answer, WorkerDown
from treadle.server.workers.routing import (
    REROUTABLE,
    WORKER_HEADER,
    every_worker,
    odd_path,
    worker_of,
)
from treadle.server.workers.supervisor import Workers

RETRY_AFTER_S = 2
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
        WORKER_HEADER.encode(),
    }
)
_WS_OWN = frozenset(
    {
        "host",
        "connection",
        "upgrade",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
        "content-length",
        "transfer-encoding",
    }
)
_WS_HANDSHAKE = ("Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version")
_WS_SENDABLE = 1000, 4999  # 1005, 1006 and 1015 can only be received, never sent


class _ClientGone(Exception):
    pass


async def _answer(send: Send, status: int, code: str, message: str, retry: bool = False) -> None:
    data = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    if retry:
        headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _send_reply(send: Send, reply: Reply) -> None:
    shown = [(name, value) for name, value in reply.headers if name.lower() not in _HOP]
    await send({"type": "http.response.start", "status": reply.status, "headers": shown})
    await send({"type": "http.response.body", "body": reply.body})


def _forwarded(headers: list[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], bool]:
    """The client's headers a worker gets (hop-by-hop ones dropped), and whether the body is
    chunked (no Content-Length)."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    kept = [(n, v) for n, v in headers if n.lower() not in _HOP and n.lower() not in named]
    chunked = any(n.lower() == b"transfer-encoding" for n, _ in headers) and not any(
        n.lower() == b"content-length" for n, _ in headers
    )
    return kept, chunked


async def _streamed(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        yield message.get("body", b"")
        if not message.get("more_body"):
            return


async def _whole(receive: Receive) -> bytes:
    return b"".join([chunk async for chunk in _streamed(receive)])


class Front:
    def __init__(self, workers: Workers) -> None:
        self.workers = workers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.workers.start()
                except Exception as error:
                    await self.workers.stop()
                    await send({"type": "lifespan.startup.failed", "message": str(error)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.workers.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _health(self, send: Send) -> None:
        ready = self.workers.ready_count()
        body = {
            "status": "ok" if ready == self.workers.count else "degraded",
            "version": treadle.__version__,
            "workers": {"count": self.workers.count, "ready": ready},
        }
        data = json.dumps(body).encode()
        status = 200 if ready == self.workers.count else 503
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if path == "/health":
            await self._health(send)
            return
        if odd_path(path):
            await _answer(send, 404, "not_found", "Not Found")
            return
        query: bytes = scope["query_string"]
        method: str = scope["method"]
        slot = worker_of(path, query, self.workers.count)
        target = scope.get("raw_path") or path.encode()
        if query:
            target += b"?" + query
        headers, chunked = _forwarded(scope["headers"])
        listing = every_worker(method, path, query)
        body: AsyncIterator[bytes] | bytes
        try:
            if (method, path) in REROUTABLE or listing:  # sent again, or to several workers
                body = await _whole(receive)
                headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
                headers.append((b"content-length", b"%d" % len(body)))
            else:
                body = _streamed(receive)
                if chunked:
                    headers.append((b"transfer-encoding", b"chunked"))
            if listing:
                assert isinstance(body, bytes)
                reply = await bash_events(self.workers, target, query, headers, body)
                await _send_reply(send, reply)
                return
            answer = await self._exchange(slot, method.encode(), target, headers, body)
        except BodyTooLarge as error:
            await _answer(send, 413, BodyTooLarge.code, str(error.detail))
            return
        except _ClientGone:
            return
        except WorkerDown as error:
            await _answer(send, 502, "worker_down", f"{error}; retry", retry=True)
            return
        except TimeoutError:
            await _answer(send, 503, "worker_starting", "no worker is up yet; retry", retry=True)
            return
        shown = [(n, v) for n, v in answer.headers if n.lower() not in _HOP]
        await send({"type": "http.response.start", "status": answer.status, "headers": shown})
        async for chunk in answer.body():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def _exchange(
        self,
        slot: int | None,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterator[bytes] | bytes,
    ) -> Answer:
        """The answer of the request's worker; a buffered request its worker names another
        for is sent there (once)."""
        for _hop in range(2):
            link = await self.workers.link(slot)
            answer = await link.request(method, target, headers, body)
            elsewhere = dict(answer.headers).get(WORKER_HEADER.encode())
            if answer.status != 421 or elsewhere is None or not isinstance(body, bytes):
                return answer
            answer.discard()
            slot = int(elsewhere) % self.workers.count
        return answer

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        path: str = scope["path"]
        if odd_path(path):
            await send({"type": "websocket.close", "code": 4404, "reason": "no such route"})
            return
        target = (scope.get("raw_path") or path.encode()).decode("latin-1")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name.decode("latin-1").lower() not in _WS_OWN or name.lower() == b"host"
        ]
        try:
            link = await self.workers.link(
                worker_of(path, scope["query_string"], self.workers.count)
            )
            worker = await unix_connect(
                link.path,
                "ws://worker/",
                create_connection=_forwarding(target, headers),
                subprotocols=scope.get("subprotocols") or None,
                compression=None,
                max_size=None,
                ping_interval=None,
                user_agent_header=None,
            )
        except (OSError, InvalidHandshake, WorkerDown, TimeoutError):
            await send({"type": "websocket.close", "code": 1011, "reason": "no worker answered"})
            return
        async with worker:
            await send({"type": "websocket.accept", "subprotocol": worker.subprotocol})
            await _relay(worker, receive, send)


def _forwarding(target: str, headers: list[tuple[str, str]]) -> type[ClientConnection]:
    """A connection whose handshake carries the client's target and headers (Host, Origin,
    keys) as they came, with its own key and version."""

    class Forwarding(ClientConnection):
        async def handshake(self, *args: Any, **kwargs: Any) -> None:
            made = self.protocol.connect()
            sent = Headers(headers)
            for name in (*_WS_HANDSHAKE, "Sec-WebSocket-Protocol"):
                if name in made.headers:
                    sent[name] = made.headers[name]
            made.path, made.headers = target, sent
            self.protocol.connect = lambda: made  # type: ignore[method-assign]
            await super().handshake(None, None)

    return Forwarding


async def _relay(worker: ClientConnection, receive: Receive, send: Send) -> None:
    """Messages both ways until one side closes; the worker's close code reaches the client."""

    async def from_client() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") is not None:
                await worker.send(message["text"])
            elif message.get("bytes") is not None:
                await worker.send(message["bytes"])

    async def from_worker() -> None:
        async for data in worker:
            if isinstance(data, str):
                await send({"type": "websocket.send", "text": data})
            else:
                await send({"type": "websocket.send", "bytes": data})

    tasks = [asyncio.create_task(from_client()), asyncio.create_task(from_worker())]
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if tasks[1] in done:  # the worker closed (or went away): tell the client why
        closed = worker.close_code
        code = closed if closed is not None and _sendable(closed) else 1011
        reason = (worker.close_reason or "") if code == closed else "the worker went away"
        with contextlib.suppress(Exception):  # the client went too
            await send({"type": "websocket.close", "code": code, "reason": reason})
    else:
        await worker.close()


def _sendable(code: int) -> bool:
    return _WS_SENDABLE[0] <= code <= _WS_SENDABLE[1] and code not in (1005, 1006, 1015)


def serve_front(host: str, port: int, settings: dict[str, Any], count: int) -> None:
    """Run the front on ``host:port`` and ``count`` workers, each given ``settings`` (what a
    single server's ``create_app`` is given); returns when it is stopped (SIGTERM, Ctrl-C)."""
    import uvicorn

    from treadle.server.security import PUBLIC_PATHS, SecurityConfig, SecurityMiddleware
    from treadle.store.leases import SERVER, new_owner

    security = SecurityConfig.build(
        settings["api_keys"],
        bind_host=host,
        extra_hosts=settings["allowed_hosts"],
        max_body_bytes=settings["max_body_bytes"],
        public_paths=PUBLIC_PATHS,
    )
    front = SecurityMiddleware(Front(Workers(count, settings, new_owner(SERVER))), config=security)
    uvicorn.run(
        front,
        host=host,
        port=port,
        log_level="info",
        ws="websockets-sansio",
        lifespan="on",
        timeout_graceful_shutdown=10,
    )
