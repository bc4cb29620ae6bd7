"""Who may drive the server: API keys, Host and Origin checks, request size limits.

A server that runs bash must not be driven by any web page the user happens to open: the Host
check stops DNS rebinding and the Origin check stops cross-site requests, also with no key set.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from treadle.server.errors import BodyTooLarge, error_body, json_response
from treadle.server.limits import MAX_BODY_BYTES

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SESSION_KEY_HEADER = "x-session-api-key"
"""Where the OpenHands SDK's client sends its key (accepted under ``SESSION_KEY_PREFIX``)."""
SESSION_KEY_PREFIX = "/openhands/"
PUBLIC_PATHS = frozenset(
    {"/", "/favicon.ico", "/docs", "/openapi.json", "/health", "/openhands/health"}
)
"""The server's paths served without a key (the Canvas page asks for the key itself)."""


@dataclass(frozen=True)
class SecurityConfig:
    api_keys: tuple[str, ...] = ()
    allowed_hosts: frozenset[str] = LOCAL_HOSTS
    """Host names (no port) the server answers to."""
    max_body_bytes: int = MAX_BODY_BYTES
    public_paths: frozenset[str] = field(default_factory=lambda: frozenset({"/", "/favicon.ico"}))
    """Paths served without a key (the Canvas page asks for the key itself)."""

    @classmethod
    def build(
        cls,
        api_keys: Iterable[str] = (),
        *,
        bind_host: str = "127.0.0.1",
        extra_hosts: Iterable[str] = (),
        max_body_bytes: int | None = None,
        public_paths: Iterable[str] = ("/",),
    ) -> SecurityConfig:
        """Keys from the arguments, else ``TREADLE_API_KEYS`` (comma-separated)."""
        keys = [key for key in api_keys if key]
        if not keys:
            keys = [
                k.strip() for k in os.environ.get("TREADLE_API_KEYS", "").split(",") if k.strip()
            ]
        hosts = set(LOCAL_HOSTS) | {h.lower() for h in extra_hosts}
        if bind_host not in ("0.0.0.0", "::", ""):
            hosts.add(bind_host.lower().strip("[]"))
        return cls(
            api_keys=tuple(keys),
            allowed_hosts=frozenset(hosts),
            max_body_bytes=max_body_bytes or cls.max_body_bytes,
            public_paths=frozenset(public_paths),
        )

    def key_is_valid(self, presented: str | None) -> bool:
        if not self.api_keys:
            return True
        if not presented:
            return False
        return any(hmac.compare_digest(presented.encode(), key.encode()) for key in self.api_keys)


def host_name(value: str) -> str:
    """The host of a Host header value, without port, lower-case ('[::1]:80' -> '::1')."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def bearer_key(authorization: str | None) -> str | None:
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return None


class SecurityMiddleware:
    """Checks every HTTP request and WebSocket handshake before any route sees it.

    The API key of a WebSocket may come later, in its first message: the stream route checks
    it then (``ws_key_required``).
    """

    def __init__(self, app: ASGIApp, config: SecurityConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        problem = self._problem(scope, headers)
        if problem is not None:
            status, code, message = problem
            if scope["type"] == "websocket":
                await send(
                    {"type": "websocket.close", "code": 4000 + status, "reason": message[:120]}
                )
                return
            await json_response(send, status, error_body(code, message))
            return
        if scope["type"] == "http":
            # Content-Length may be absent (chunked) or lie: count what really arrives.
            receive = limited_receive(receive, self.config.max_body_bytes)
        await self.app(scope, receive, send)

    def _problem(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str, str] | None:
        config = self.config
        host = host_name(headers.get("host", ""))
        if host not in config.allowed_hosts:
            return (
                403,
                "host_not_allowed",
                (
                    f"Host {host!r} is not allowed (DNS rebinding protection); "
                    "start the server with --allowed-host to add it"
                ),
            )
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, headers.get("host", "")):
            return (
                403,
                "origin_not_allowed",
                (f"Origin {origin!r} may not drive this server (cross-site request refused)"),
            )
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > config.max_body_bytes:
            return 413, BodyTooLarge.code, str(BodyTooLarge(config.max_body_bytes).detail)
        needs_key = (
            scope["type"] == "http"
            and bool(config.api_keys)
            and scope["path"] not in config.public_paths
            and not scope["path"].startswith("/static/")
        )
        presented = bearer_key(headers.get("authorization"))
        if presented is None and scope["path"].startswith(SESSION_KEY_PREFIX):
            # The OpenHands SDK's client sends its key in a header of its own.
            presented = headers.get(SESSION_KEY_HEADER)
        if needs_key and not config.key_is_valid(presented):
            return 401, "unauthorized", "a valid API key is required: Authorization: Bearer KEY"
        return None

    def _origin_allowed(self, origin: str, host_header: str) -> bool:
        # Browsers send Origin on cross-site and on WebSocket requests; the page served by this
        # server has the server's own origin. Anything else (incl. "null") is refused.
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        if parts.hostname.lower() not in self.config.allowed_hosts:
            return False
        return parts.netloc.lower() == host_header.strip().lower()


def limited_receive(receive: Receive, limit: int) -> Receive:
    """``receive`` that raises BodyTooLarge (a 413) once more than ``limit`` body bytes came:
    whoever reads the body stops there, so no route ever holds more than ``limit`` bytes."""
    received = 0

    async def limited() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge(limit)
        return message

    return limited


def ws_key_required(config: SecurityConfig, headers: dict[str, str]) -> bool:
    """Whether a WebSocket must still present its key in its first message."""
    return bool(config.api_keys) and not config.key_is_valid(
        bearer_key(headers.get("authorization"))
    )
