"""The real model at an OpenAI-compatible base URL (vLLM, llama.cpp, Ollama, a proxy: a model
named ``openai/NAME`` with a ``base_url``), called over HTTP with ``httpx`` directly.

LiteLLM costs several milliseconds of CPU per call (its request and response translation,
logging and cost hooks), and the ``openai`` package it builds on about 2.5 ms more than the
HTTP exchange itself (its request options, headers and typed response models), the larger
part of a server's CPU per model step. The chat-completions endpoint needs neither: one JSON
body POSTed, one JSON answer read by attribute (``Answer``). What this client guarantees is
``LiteLLMModel``'s, from the same shared code (``treadle.runtime.llm.provider``): retries and
their deadline, ``Retry-After``, errors in words, responses read the same way, usage and cost.
LiteLLM's knowledge of models still answers for the window and prices (its map file, read
without importing LiteLLM: ``model_map``) and for token counts (LiteLLM imported when a count
or a price is first needed).

The client's connection pool is this object's: ``close`` frees it, and the conversation's
parts that built the model close it with them. Its transports are guarded (``guard.py``): an
answer's body is capped at ``ModelSettings.max_response_bytes`` and each attempt, its body
included, ends within the attempt's timeout.
"""

from __future__ import annotations

import http.cookiejar
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from treadle.runtime.llm.base import ModelError, ModelRequest, ModelResponse
from treadle.runtime.llm.guard import UnreadableAnswer, guard_client
from treadle.runtime.llm.litellm_model import (
    LiteLLMPricer,
    litellm_context_window,
    litellm_model_info,
    litellm_token_counter,
)
from treadle.runtime.llm.model_map import openai_model_info, window_of
from treadle.runtime.llm.provider import (
    Failure,
    ModelSettings,
    ProviderModel,
    RetryNotice,
    call_with_retries,
    describe,
    read_response,
    retry_after,
    says_context_exceeded,
    short,
)

if TYPE_CHECKING:
    import ssl

    import httpx

PROVIDER_PREFIX = "openai/"


def speaks_openai(model: str, base_url: str | None) -> bool:
    """Whether this client serves ``model`` at ``base_url``: an ``openai/NAME`` model with a base
    URL. Any other model (a named provider, OpenAI's own endpoint) is LiteLLM's."""
    return (
        bool(base_url) and model.startswith(PROVIDER_PREFIX) and len(model) > len(PROVIDER_PREFIX)
    )


_TLS_CONTEXT: ssl.SSLContext | None = None
_TLS_CONTEXT_LOCK = threading.Lock()


def shared_tls_context() -> ssl.SSLContext:
    """The TLS trust every client of this process verifies with, made once as httpx makes its
    default (the CA bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set): an SSL context is
    safe to share between connections and threads, and read-only once made."""
    global _TLS_CONTEXT
    with _TLS_CONTEXT_LOCK:
        if _TLS_CONTEXT is None:
            import httpx

            _TLS_CONTEXT = httpx.create_ssl_context()
        return _TLS_CONTEXT


class OpenAICompatibleModel(ProviderModel):
    """``LanguageModel`` over ``POST {base_url}/chat/completions``."""

    def __init__(
        self,
        settings: ModelSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: RetryNotice | None = None,
    ) -> None:
        super().__init__(settings, sleep=sleep, on_retry=on_retry)
        if not speaks_openai(self.settings.model, self.settings.base_url):
            raise ModelError(
                f"model {self.settings.model}: an OpenAI-compatible client needs a model named "
                "openai/NAME and a base URL"
            )
        self._client: httpx.Client | None = None
        self._url: httpx.URL | None = None
        self._tools_encoded: tuple[list[dict[str, Any]], str] = ([], "[]")
        self._closed = False
        self._lock = threading.Lock()
        self._count = litellm_token_counter(self.settings.model)
        self._price = LiteLLMPricer(self.settings.model, _model_info)

    def context_window(self) -> int | None:
        """The window LiteLLM's map knows for the name (``openai/gpt-4o`` behind a proxy);
        None for a local endpoint's own name, as on LiteLLM's path."""
        try:
            return window_of(openai_model_info(self.settings.model))
        except LookupError:  # the map file is not where LiteLLM keeps it: ask LiteLLM
            return litellm_context_window(self.settings.model)

    def count_tokens(self, text: str) -> int:
        return self._count(text)

    def close(self) -> None:
        """Close the connection pool; the model answers no more calls."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def complete(self, request: ModelRequest) -> ModelResponse:
        client, url = self._http()
        # The body is encoded once for every attempt (a value JSON cannot carry is the
        # caller's error); the tool schemas, the same at every step, once for all calls.
        parts = [
            '{"model":',
            _json(self.settings.model.removeprefix(PROVIDER_PREFIX)),
            ',"messages":',
            _json(list(request.messages)),
        ]
        if request.tools:
            parts += [',"tools":', self._tools_json(request.tools)]
        if self.settings.temperature is not None:
            parts += [',"temperature":', _json(self.settings.temperature)]
        content = ("".join(parts) + "}").encode()
        answer = call_with_retries(
            self, lambda timeout_s: _post(client, url, content, timeout_s), self._failure
        )
        return read_response(self, answer, lambda raw: self._price(raw.as_dict()))

    def _tools_json(self, tools: Sequence[dict[str, Any]]) -> str:
        seen, encoded = self._tools_encoded
        if tools != seen:  # compared in C: far cheaper than encoding them again
            encoded = _json(list(tools))
            self._tools_encoded = (list(tools), encoded)
        return encoded

    def _http(self) -> tuple[httpx.Client, httpx.URL]:
        """The client and its connection pool, made on the first call (httpx imported then: a
        command line that never calls a model never loads it), and the endpoint's URL (parsed
        once: httpx parses a URL given as text at every request)."""
        import httpx

        with self._lock:
            if self._closed:
                raise ModelError(f"model {self.name} was closed: it answers no more calls")
            if self._client is None:
                self._url = httpx.URL(_with_slash(str(self.settings.base_url))).join(
                    "chat/completions"
                )
                self._client = guard_client(
                    httpx.Client(
                        headers={
                            # Local servers take any key, but some want the header; and never
                            # OPENAI_API_KEY from this process's environment.
                            "Authorization": f"Bearer {self.settings.api_key or 'no-key'}",
                            "Content-Type": "application/json",
                            "Accept": "application/json",
                            "User-Agent": USER_AGENT,
                        },
                        timeout=self.settings.timeout_s,
                        follow_redirects=True,  # a proxy's 307/308 keeps the POST and its body
                        cookies=_NoCookies(),
                        # The process's TLS trust: loading the CA bundle costs ~35 ms of CPU,
                        # more than all of a conversation's other model-client work.
                        verify=shared_tls_context(),
                        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
                    ),
                    # The endpoint is not trusted with the size or the pace of its answer:
                    # bodies are capped and each attempt ends within its timeout.
                    limit=self.settings.max_response_bytes,
                    where=self.settings.where,
                )
            assert self._url is not None
            return self._client, self._url

    def _failure(self, error: Exception) -> Failure | None:
        """An attempt's error as one of the policy's kinds (None: not a provider's error).
        Retried as on LiteLLM's path: 408, 429, 5xx, timeouts, cut connections and a body
        that is not JSON."""
        import httpx

        where = self.settings.where
        if isinstance(error, UnreadableAnswer):  # too large or compressed: the same next time
            return Failure("unusable", error.reason)
        if isinstance(error, RecursionError):  # JSON nested past what json.loads can recurse
            return Failure("unusable", describe(where, "", too_deep=True))
        if isinstance(error, ValueError):
            # A 200 whose body is not JSON (json.JSONDecodeError, or bytes of no encoding).
            return Failure("transient", describe(where, short(error), not_json=True))
        if isinstance(error, httpx.TimeoutException):
            return Failure("transient", describe(where, short(error), timed_out=True))
        if isinstance(error, httpx.TransportError):
            return Failure("transient", describe(where, short(error), cut=True))
        if not isinstance(error, RefusedAnswer):
            return None
        status = error.status
        reason = describe(where, short(error.message or f"HTTP {status}"), status=status)
        if status in (408, 429) or status >= 500:
            return Failure("transient", reason, retry_after(error.headers))
        if says_context_exceeded(status, error.code, error.message):
            return Failure("context", reason)
        if status == 401:
            return Failure("auth", reason)
        return Failure("refused", reason)


USER_AGENT = "treadle"


class _NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps none: a model endpoint is answered by key, not by session, and
    reading every answer's headers for cookies (httpx does it for each response) cost ~7% of
    a busy server's model-client CPU."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


def _with_slash(url: str) -> str:
    """``url`` ending in ``/``: ``chat/completions`` is joined under its last segment only
    then (``http://h/v1`` + ``chat/completions`` would be ``http://h/chat/completions``)."""
    return url if url.endswith("/") else url + "/"


def _json(value: Any) -> str:
    """JSON in ASCII (``\\u`` escapes): a lone surrogate a tool printed cannot fail the
    request's encoding, and the endpoint reads the same text."""
    return json.dumps(value, allow_nan=False)


def _post(client: httpx.Client, url: httpx.URL, content: bytes, timeout_s: float) -> Answer:
    """One attempt: the answer, or ``RefusedAnswer`` for an HTTP error status (httpx's own
    errors, ``UnreadableAnswer`` and a body that is not JSON raised as they are)."""
    response = client.post(url, content=content, timeout=timeout_s)
    if response.status_code != 200:  # an error status; a 204 or a 3xx left has no answer
        raise RefusedAnswer(response)
    return Answer(json.loads(response.content))


class RefusedAnswer(Exception):
    """The endpoint answered with an error status: its status, headers (``Retry-After``),
    and the message and code of its error body (OpenAI's ``{"error": {"message", "code"}}``,
    or whatever text it sent)."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.headers = response.headers
        self.message, self.code = _error_of(response)
        super().__init__(f"HTTP {self.status}: {self.message}")


def _error_of(response: httpx.Response) -> tuple[str, str | None]:
    try:
        body: Any = json.loads(response.content)
    except (ValueError, RecursionError):
        return response.content[:2000].decode("utf-8", "replace").strip(), None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if isinstance(body, dict):
        message, code = body.get("message"), body.get("code")
        return (
            message if isinstance(message, str) else json.dumps(body)[:2000],
            code if isinstance(code, str) else None,
        )
    return json.dumps(body)[:2000], None


class Answer:
    """A JSON answer read by attribute, as ``read_response`` reads both clients' answers
    (``answer.choices[0].message.tool_calls``): a missing field is an AttributeError (so
    ``getattr(..., None)`` says None), nested objects are Answers, lists of them lists."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    def __getattr__(self, name: str) -> Any:
        value = self._value
        if not isinstance(value, dict) or name not in value:
            raise AttributeError(name)
        return _wrapped(value[name])

    def as_dict(self) -> Any:
        """The JSON value itself (what LiteLLM's price function reads)."""
        return self._value

    def model_dump_json(self) -> str:
        """The answer as JSON text (what an error about it shows)."""
        return json.dumps(self._value, ensure_ascii=False)

    def __repr__(self) -> str:
        return f"Answer({self._value!r})"


def _wrapped(value: Any) -> Any:
    if isinstance(value, dict):
        return Answer(value)
    if isinstance(value, list):
        return [_wrapped(item) for item in value]
    return value


def _model_info(model: str) -> Mapping[str, Any] | None:
    """What LiteLLM's map says of ``model``, from the map file when it can be read."""
    try:
        return openai_model_info(model)
    except LookupError:
        return litellm_model_info(model)
