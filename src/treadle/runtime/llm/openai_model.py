"""The real model at an OpenAI-compatible base URL (vLLM, llama.cpp, Ollama, a proxy: a model
named ``openai/NAME`` with a ``base_url``), called with the ``openai`` package directly.

LiteLLM builds on the same package but costs several milliseconds of CPU per call on top of it
(its request and response translation, logging and cost hooks), the larger part of a server's
CPU per model step; this client does only what the chat-completions endpoint needs. What it
guarantees is ``LiteLLMModel``'s, from the same shared code (``treadle.runtime.llm.provider``):
retries and their deadline, errors in words, responses read the same way. LiteLLM's knowledge
of models still answers for the window and prices (its map file, read without importing
LiteLLM: ``model_map``) and for token counts (LiteLLM imported when a count is first needed).

``openai`` is imported on the first call (a command line that never calls a model never loads
it). The client's connection pool is this object's: ``close`` frees it, and the conversation's
parts that built the model close it with them. Its transports are guarded (``guard.py``): an
answer's body is capped at ``ModelSettings.max_response_bytes`` and each attempt, its body
included, ends within the attempt's timeout.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
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
    """``LanguageModel`` over ``openai.OpenAI(base_url=...).chat.completions.create``."""

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
        self._client: Any = None
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
        client = self._openai()
        body: dict[str, Any] = {
            "model": self.settings.model.removeprefix(PROVIDER_PREFIX),
            "messages": list(request.messages),
        }
        if request.tools:
            body["tools"] = list(request.tools)
        if self.settings.temperature is not None:
            body["temperature"] = self.settings.temperature
        from openai.types.chat import ChatCompletion

        # ``client.post`` sends the body as it is: ``chat.completions.create`` would first walk
        # every message and tool schema against the SDK's typed dicts (about a millisecond of
        # CPU per call here) to change nothing in plain JSON. Errors and the answer's reading
        # are the SDK's either way.
        raw = call_with_retries(
            self,
            lambda timeout_s: client.post(
                "/chat/completions",
                body=body,
                cast_to=ChatCompletion,
                options={"timeout": timeout_s},
            ),
            self._failure,
        )
        return read_response(self, raw, self._price)

    def _openai(self) -> Any:
        """The client and its connection pool, made on the first call."""
        with self._lock:
            if self._closed:
                raise ModelError(f"model {self.name} was closed: it answers no more calls")
            if self._client is None:
                import openai

                self._client = openai.OpenAI(
                    # Local servers take any key, but the client sends none without one; and
                    # never OPENAI_API_KEY from this process's environment.
                    api_key=self.settings.api_key or "no-key",
                    base_url=self.settings.base_url,
                    max_retries=0,  # retries are ours, so backoff and counting are in one place
                    timeout=self.settings.timeout_s,
                    # Its own pool, the process's TLS trust: loading the CA bundle costs ~35 ms
                    # of CPU, more than all of a conversation's other model-client work. The
                    # endpoint is not trusted with the size or the pace of its answer: bodies
                    # are capped and each attempt ends within its timeout (``guard.py``).
                    http_client=guard_client(
                        openai.DefaultHttpxClient(verify=shared_tls_context()),
                        limit=self.settings.max_response_bytes,
                        where=self.settings.where,
                    ),
                )
            return self._client

    def _failure(self, error: Exception) -> Failure | None:
        """The ``openai`` package's error as one of the policy's kinds (None: not a provider's
        error). Retried as on LiteLLM's path: 408, 429, 5xx, timeouts, cut connections and a
        body that is not JSON."""
        import openai

        where = self.settings.where
        if isinstance(error, UnreadableAnswer):  # too large or compressed: the same next time
            return Failure("unusable", error.reason)
        if isinstance(error, RecursionError):  # JSON nested past what json.loads can recurse
            return Failure("unusable", describe(where, "", too_deep=True))
        if isinstance(error, json.JSONDecodeError):  # a 200 whose body is not JSON
            return Failure("transient", describe(where, short(error), not_json=True))
        if isinstance(error, openai.APITimeoutError):
            return Failure("transient", describe(where, short(error), timed_out=True))
        if isinstance(error, openai.APIConnectionError):
            return Failure("transient", describe(where, short(error), cut=True))
        if not isinstance(error, openai.APIStatusError):
            # Any other error of the package is about this answer: asking again will not help.
            return (
                Failure("refused", short(error)) if isinstance(error, openai.OpenAIError) else None
            )
        status = error.status_code
        body = error.body
        message = body.get("message") if isinstance(body, dict) else body
        code = body.get("code") if isinstance(body, dict) else None
        text = short(message if isinstance(message, str) and message.strip() else error)
        reason = describe(where, text, status=status)
        if status in (408, 429) or status >= 500:
            return Failure("transient", reason, retry_after(error.response.headers))
        if says_context_exceeded(status, code, str(message)):
            return Failure("context", reason)
        if status == 401:
            return Failure("auth", reason)
        return Failure("refused", reason)


def _model_info(model: str) -> Mapping[str, Any] | None:
    """What LiteLLM's map says of ``model``, from the map file when it can be read."""
    try:
        return openai_model_info(model)
    except LookupError:
        return litellm_model_info(model)
