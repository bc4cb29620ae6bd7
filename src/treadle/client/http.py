"""The HTTP side of the typed client: one ``httpx.Client`` with the key; server errors turned
into typed ``RemoteError``s carrying the status, the code and the server's message; responses
read up to a size limit; idempotent GETs retried (a bounded number of times) on 503/429."""

from __future__ import annotations

import email.utils
import json
import time
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import ValidationError

from treadle.api.errors import ErrorBody
from treadle.errors import TreadleError

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
"""The largest answer read by default (a whole log's path or audit fits; a runaway does not)."""
MAX_ERROR_BYTES = 64 * 1024
"""How much of an error answer is read: enough for any message the server writes."""
RETRY_STATUSES = (429, 503)
"""Answers that say "retry later": a GET (idempotent) is retried after them."""


class RemoteError(TreadleError):
    """An error answer of the server: its HTTP ``status``, its ``code`` (e.g. ``not_found``,
    ``too_many_running``, ``store_unavailable``) and its ``message``. The subclasses below
    name the kinds a caller may handle; each is still a ``RemoteError``."""

    def __init__(
        self, status: int, code: str, message: str, *, retry_after_s: float | None = None
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        """What the server's ``Retry-After`` asked for (429 and 503), in seconds."""
        super().__init__(f"{status} {code}: {message}")


class InvalidRequest(RemoteError):
    """400 or 422: the request itself is wrong (the code names what); do not retry it."""


class Unauthorized(RemoteError):
    """401 or 403: no valid API key, a Host/Origin the server refuses, or settings asking for
    less isolation than the server's sandbox limits allow (code ``sandbox_refused``)."""


AuthError = Unauthorized
"""The name ``Unauthorized`` had in earlier versions; kept so old ``except AuthError`` still works."""


class NotFound(RemoteError):
    """404: no such conversation or event."""


class Conflict(RemoteError):
    """409: not possible in the conversation's state now (running, nothing pending...)."""


class TooLarge(RemoteError):
    """413: the body (``body_too_large``) or an archive (``archive_too_large``) is over the
    server's limit."""


class TooManyRequests(RemoteError):
    """429: e.g. ``too_many_running`` (the server's ``--max-running``); retry later."""


class Unavailable(RemoteError):
    """503: the server's store cannot be reached now (``store_unavailable``); retry later."""


class ServerFailed(RemoteError):
    """500 or another 5xx: the server failed."""


class ConnectionFailed(TreadleError):
    """No answer: the server could not be reached, or the connection broke mid-answer."""


class BadResponse(TreadleError):
    """An answer the client cannot use: over the size limit, or not the JSON it should be."""


_BY_STATUS: dict[int, type[RemoteError]] = {
    400: InvalidRequest,
    422: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    429: TooManyRequests,
    503: Unavailable,
}


def remote_error(
    status: int, code: str, message: str, retry_after_s: float | None = None
) -> RemoteError:
    """The typed error for an error answer."""
    kind = _BY_STATUS.get(status, ServerFailed if status >= 500 else RemoteError)
    return kind(status, code, message, retry_after_s=retry_after_s)


class HttpApi:
    """Requests to one server. ``max_retries``: how often a GET answered 429/503 (or that
    could not connect) is tried again, waiting what ``Retry-After`` asks (at most
    ``max_retry_wait_s`` each; a longer wait raises at once). Other methods are never
    retried: the server may have acted on them. ``max_response_bytes`` bounds what is read."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        *,
        max_retries: int = 3,
        max_retry_wait_s: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.max_retries = max_retries
        self.max_retry_wait_s = max_retry_wait_s
        self.max_response_bytes = max_response_bytes
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        retries = self.max_retries if method.upper() == "GET" else 0
        for attempt in range(retries + 1):
            try:
                return self._request_once(method, path, **kwargs)
            except (RemoteError, ConnectionFailed) as error:
                wait = self.retry_wait(error, attempt)
                if attempt == retries or wait is None:
                    raise
                time.sleep(wait)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def retry_wait(self, error: Exception, attempt: int) -> float | None:
        """Seconds to wait before trying again, or None when this error is final."""
        backoff: float = min(self.max_retry_wait_s, 0.5 * 2**attempt)
        if isinstance(error, ConnectionFailed):
            return backoff if isinstance(error.__cause__, httpx.ConnectError) else None
        if not isinstance(error, RemoteError) or error.status not in RETRY_STATUSES:
            return None
        if error.retry_after_s is None:
            return backoff
        return error.retry_after_s if error.retry_after_s <= self.max_retry_wait_s else None

    def _request_once(self, method: str, path: str, **kwargs: Any) -> Any:
        response, body = self._send(method, path, **kwargs)
        if response.status_code >= 400:
            raise _error_of(response, body)
        if response.status_code == 204 or not body:
            return None
        try:
            return json.loads(body)
        except ValueError:
            raise BadResponse(
                f"{method} {path} answered {response.status_code} with a body that is not "
                f"JSON: {body[:200]!r}"
            ) from None

    def _send(self, method: str, path: str, **kwargs: Any) -> tuple[httpx.Response, bytes]:
        """The answer and its body, read up to the limit (an error's up to MAX_ERROR_BYTES)."""
        where = f"{method} {self.base_url}{path}"
        try:
            response = self._client.send(
                self._client.build_request(method, path, **kwargs), stream=True
            )
        except httpx.TransportError as error:
            raise ConnectionFailed(f"{where}: no answer ({_describe(error)})") from error
        try:
            failed = response.status_code >= 400
            limit = MAX_ERROR_BYTES if failed else self.max_response_bytes
            declared = response.headers.get("content-length", "")
            if not failed and declared.isdigit() and int(declared) > limit:
                raise BadResponse(f"{where}: the answer is {declared} bytes, over {limit} bytes")
            body = bytearray()
            for chunk in response.iter_bytes():  # decoded: a compressed bomb counts in full
                body += chunk
                if len(body) > limit:
                    if failed:  # the message is at the start; the rest is not needed
                        break
                    raise BadResponse(f"{where}: the answer is over {limit} bytes")
            return response, bytes(body[:limit])
        except httpx.TransportError as error:
            raise ConnectionFailed(f"{where}: the answer broke off ({_describe(error)})") from error
        finally:
            response.close()

    def ws_url(self, path: str) -> str:
        scheme = "wss" if self.base_url.startswith("https") else "ws"
        return scheme + self.base_url[self.base_url.index(":") :] + path

    def close(self) -> None:
        self._client.close()


def _error_of(response: httpx.Response, body: bytes) -> RemoteError:
    """The typed error for an error answer: the server's ``{"error": {code, message}}``, or
    (from a proxy, say) the start of whatever it sent."""
    retry_after = retry_after_s(response.headers.get("retry-after"))
    try:
        error = ErrorBody.model_validate_json(body).error
        code, message = error.code, error.message
    except ValidationError:
        text = body[:300].decode("utf-8", errors="replace")
        code, message = "http_error", text or response.reason_phrase
    return remote_error(response.status_code, code, message, retry_after)


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (it holds seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _describe(error: httpx.TransportError) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
