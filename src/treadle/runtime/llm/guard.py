"""A model endpoint's answer, bounded: the endpoint is outside the system and is treated as
hostile. ``guard_client`` wraps an httpx client's transports (``httpx``, or its successor
``httpx2``: the OpenAI-compatible client's, and any other's) so that

- a response body past ``limit`` bytes is refused (``UnreadableAnswer``) as soon as the count
  passes it, a ``Content-Length`` past it before a byte is read: no multi-GB or endless
  (chunked) body is held in memory;
- a compressed body is refused: the request asks for none (``Accept-Encoding: identity``),
  and a decoded size cannot be bounded by the bytes received (a 1 MB gzip bomb is 1 GB);
- the whole request, connecting to the body's last byte, ends within the request's timeout.
  httpx's timeouts bound each socket operation, not their sum: a body trickling one byte per
  few seconds never times out. Each socket read and write here waits at most what is left of
  the request's time, so such a body ends at the deadline with httpx's own ``ReadTimeout``
  (a timeout, as any other, for the retry policy).

The deadline of the socket operations needs the transport's connection pool (httpcore's
``_network_backend``, a private attribute: there is no public way in); a transport of another
shape keeps a coarser deadline, checked as each chunk of the body arrives.
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_DEADLINE: ContextVar[float | None] = ContextVar("treadle_model_request_deadline", default=None)
"""When the request in progress on this thread must be over (``time.monotonic``); None:
none in progress here. Read by the socket operations of the guarded pools."""


class UnreadableAnswer(Exception):
    """The endpoint's answer is refused unread: too large, or compressed. Not an error of the
    HTTP library, so httpx does not wrap it: it reaches the client's
    failure mapping as it is, which makes it a non-retryable model error (asking again gets
    the same answer)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def size_in_words(size: int) -> str:
    """``size`` bytes as an error says it: 32 MiB, 512 KiB, 100 bytes."""
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} bytes"


def guard_client(client: Any, *, limit: int, where: str) -> Any:
    """``client`` (an ``httpx.Client`` or ``httpx2.Client``) with every transport it may use
    guarded: its default one and those of its mounts (the proxies the environment names),
    so the environment's proxies keep working. Its pools, TLS context and limits are
    unchanged; closing the client closes them as before."""
    module = _httpx_of(client)
    # httpx has no public way to wrap the transports it built from its own arguments and the
    # environment (passing ``transport=`` turns the environment's proxies off).
    client._transport = GuardedTransport(client._transport, module, limit=limit, where=where)
    client._mounts = {
        pattern: None if transport is None else GuardedTransport(transport, module, limit, where)
        for pattern, transport in client._mounts.items()
    }
    return client


def _httpx_of(client: Any) -> Any:
    """The httpx module (``httpx`` or ``httpx2``) ``client`` is a client of."""
    for cls in type(client).__mro__:
        root = cls.__module__.split(".")[0]
        if root.startswith("httpx"):
            return importlib.import_module(root)
    raise TypeError(f"not an httpx client: {type(client).__name__}")


class GuardedTransport:
    """An httpx transport around ``inner`` whose responses are bounded (this module's
    docstring). ``limit``: the most bytes of a body; ``where``: the endpoint, as errors name
    it."""

    def __init__(self, inner: Any, httpx: Any, limit: int, where: str) -> None:
        self.inner = inner
        self.limit = limit
        self.where = where
        self._httpx = httpx
        pool: Any = getattr(inner, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            core = importlib.import_module(type(pool).__module__.split(".")[0])
            pool._network_backend = _DeadlineBackend(backend, core)

    def handle_request(self, request: Any) -> Any:
        read = (request.extensions.get("timeout") or {}).get("read")
        deadline = None if read is None else time.monotonic() + read
        outer = _DEADLINE.get()
        if outer is not None:
            deadline = outer if deadline is None else min(deadline, outer)
        request.headers["Accept-Encoding"] = "identity"
        token = _DEADLINE.set(deadline)
        try:
            response = self.inner.handle_request(request)
        finally:
            _DEADLINE.reset(token)
        encoding = response.headers.get("content-encoding", "").strip().lower()
        length = response.headers.get("content-length", "").strip()
        refused = None
        if encoding not in ("", "identity"):
            refused = (
                f"{self.where} answered with a {encoding}-compressed body though asked for "
                "none (its size once decoded cannot be bounded)"
            )
        elif length.isdigit() and int(length) > self.limit:
            refused = (
                f"{self.where} answered with a body of {size_in_words(int(length))}, past the "
                f"limit of {size_in_words(self.limit)} on a model's answer"
            )
        if refused is not None:
            response.close()  # the connection is dropped, its body never read
            raise UnreadableAnswer(refused)
        stream = _capped_stream(self._httpx)(response.stream, self, deadline, request)
        return self._httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=stream,
            extensions=response.extensions,
        )

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> GuardedTransport:
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)


@functools.cache
def _capped_stream(httpx: Any) -> type:
    """The body stream class for ``httpx``: a response's stream must be that module's
    ``SyncByteStream``."""

    class CappedStream(httpx.SyncByteStream):  # type: ignore[misc]
        """The body, counted: past the limit it stops reading (the connection is closed by
        the response's close); its reads keep the request's deadline."""

        def __init__(
            self, inner: Any, guard: GuardedTransport, deadline: float | None, request: Any
        ) -> None:
            self._inner = inner
            self._guard = guard
            self._deadline = deadline
            self._request = request

        def __iter__(self) -> Iterator[bytes]:
            guard = self._guard
            received = 0
            chunks = iter(self._inner)
            while True:
                # Set on each resumption: the body may be read after ``handle_request`` ended.
                token = _DEADLINE.set(self._deadline)
                try:
                    chunk = next(chunks, None)
                finally:
                    _DEADLINE.reset(token)
                if chunk is None:
                    return
                received += len(chunk)
                if received > guard.limit:
                    raise UnreadableAnswer(
                        f"{guard.where} answered with a body past the limit of "
                        f"{size_in_words(guard.limit)} on a model's answer (reading stopped "
                        "there)"
                    )
                if self._deadline is not None and time.monotonic() > self._deadline:
                    # Only a pool of another shape gets here (its reads are not bounded).
                    raise httpx.ReadTimeout("the request's time is up", request=self._request)
                yield chunk

        def close(self) -> None:
            self._inner.close()

    return CappedStream


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` for one socket operation, never past the request's deadline; ``expired``
    (httpcore's own timeout, which httpx maps as any other) when it has passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("the request's time is up")
    return left if timeout is None else min(timeout, left)


class _DeadlineBackend:
    """httpcore's network backend whose connections' socket operations wait at most what is
    left of the request in progress (``_DEADLINE``)."""

    def __init__(self, inner: Any, core: Any) -> None:
        self._inner = inner
        self._core = core

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> _DeadlineStream:
        timeout = _left(timeout, self._core.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _DeadlineStream(stream, self._core)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> _DeadlineStream:
        timeout = _left(timeout, self._core.ConnectTimeout)
        return _DeadlineStream(
            self._inner.connect_unix_socket(path, timeout, socket_options), self._core
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _DeadlineStream:
    """One connection's network stream, each operation within the request's deadline."""

    def __init__(self, inner: Any, core: Any) -> None:
        self._inner = inner
        self._core = core

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._inner.read(max_bytes, _left(timeout, self._core.ReadTimeout))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, self._core.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _DeadlineStream:
        timeout = _left(timeout, self._core.ConnectTimeout)
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, timeout), self._core
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
