"""The real model: any provider LiteLLM knows, or any OpenAI-compatible base URL.

LiteLLM is imported on first use (it is slow to import) with its price map read locally, so it
works offline. Rate limits and transient errors are retried with exponential backoff (or the
provider's Retry-After) within one total deadline per model call; each retry is announced.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import re
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from treadle.events.model import TokenUsage
from treadle.runtime.llm.base import (
    ContextWindowExceeded,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
)
from treadle.runtime.text import storable_text

logger = logging.getLogger(__name__)

RAW_RESPONSE_LIMIT = 64 * 1024
"""How much of a response the runtime could not use is kept with its error (characters)."""

DEADLINE_ENV = "TREADLE_MODEL_DEADLINE"


@dataclass(frozen=True)
class ModelEnvironment:
    """What this process's environment says about the model (TREADLE_MODEL, TREADLE_BASE_URL,
    TREADLE_API_KEY, TREADLE_MODEL_DEADLINE), read at the edge (``treadle.environment``) and
    given to the runtime, which never reads the environment itself. Empty: nothing set."""

    model: str | None = None
    """The default model when settings name none."""
    base_url: str | None = None
    """The operator's base URL: the default one, and always allowed the key."""
    api_key: str | None = field(default=None, repr=False)  # never in a repr, log or traceback
    deadline: str | None = None
    """``DEADLINE_ENV`` as written: checked when a model is built without a deadline of its
    own, so a bad value fails only the runs that would use it."""


@dataclass(frozen=True)
class ModelSettings:
    """How to reach the model. The API key is used for calls only: never stored or logged."""

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in a repr, log or traceback
    max_retries: int = 4
    timeout_s: float = 120.0
    """Longest wait for one attempt."""
    deadline_s: float = 600.0
    """Longest time one model call may take, every attempt and wait between them included."""
    temperature: float | None = None

    @classmethod
    def resolve(
        cls,
        environment: ModelEnvironment,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        deadline_s: float | None = None,
        *,
        key_base_urls: Collection[str] | None = None,
    ) -> ModelSettings:
        """Options first, then what ``environment`` (read by the caller, at its edge) says.

        ``key_base_urls`` (a server passes its operator's list): the base URLs this process's
        key may go to besides the provider's own endpoint and the operator's base URL; any other
        ``base_url`` gets no key. None: the key goes wherever ``base_url`` says (the user's run).
        """
        chosen = model or environment.model
        if not chosen:
            raise ModelError(
                "no model given: pass --model (e.g. openai/gpt-4o-mini, or openai/NAME with "
                "--base-url for an OpenAI-compatible server) or set TREADLE_MODEL"
            )
        if deadline_s is None:
            deadline_s = _parse_deadline(environment.deadline)
        operator_url = environment.base_url or None
        key = api_key or environment.api_key
        if base_url and key_base_urls is not None:
            allowed = {normalize_base_url(url) for url in [*key_base_urls, operator_url] if url}
            if normalize_base_url(base_url) not in allowed:
                key = None  # a base URL the operator did not allow never sees the key
        settings = cls(model=chosen, base_url=base_url or operator_url, api_key=key)
        return settings if deadline_s is None else replace(settings, deadline_s=deadline_s)

    def public(self) -> dict[str, Any]:
        """What may be stored with a conversation (no key)."""
        return {"model": self.model, "base_url": self.base_url}


def normalize_base_url(url: str) -> str:
    """``url`` compared as the endpoint it names: scheme and host lower-case, default port and
    trailing slashes dropped. Exact match only: a prefix would let ``https://api.x.com.evil``
    through."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, default) else f"{host}:{port}"
    if parts.username or parts.password:
        netloc = f"{parts.username or ''}:{parts.password or ''}@{netloc}"
    return f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}" + (
        f"?{parts.query}" if parts.query else ""
    )


def _parse_deadline(text: str | None) -> float | None:
    """``DEADLINE_ENV``'s value in seconds (None: not set); a ModelError naming it if bad."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ModelError(f"{DEADLINE_ENV}={text!r} is not a positive number of seconds")
    return value


def import_litellm() -> Any:
    """LiteLLM, configured: every import of it in Treadle goes through here. Its price map is
    read from its package: a bare ``import litellm`` first tries to fetch the map from GitHub,
    three attempts with back-off (7 s and three warnings offline) before it falls back."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def litellm_token_counter(model: str) -> Callable[[str], int]:
    """LiteLLM's token counter for ``model`` (its default tokenizer when it knows no other);
    LiteLLM is imported on the first count."""
    imported: list[Any] = []

    def count(text: str) -> int:
        if not imported:
            imported.append(import_litellm())
        return int(imported[0].token_counter(model=model, text=text))

    return count


RetryNotice = Callable[[str], None]
"""Told, in words, each time a model call is retried and why (e.g. the CLI prints it)."""


class LiteLLMModel:
    """``LanguageModel`` over ``litellm.completion``."""

    def __init__(
        self,
        settings: ModelSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: RetryNotice | None = None,
    ):
        self.settings = settings
        self._sleep = sleep
        self.on_retry: RetryNotice = on_retry or logger.warning
        self._litellm: Any = None

    @property
    def name(self) -> str:
        return self.settings.model

    def context_window(self) -> int | None:
        """The model's input window in tokens from LiteLLM's model info; None when LiteLLM
        does not know the model (a local endpoint's own name)."""
        litellm = self._litellm = self._litellm or import_litellm()
        try:
            info = litellm.get_model_info(self.settings.model)
        except Exception:  # not mapped: LiteLLM raises for every model it does not know
            return None
        window = info.get("max_input_tokens") or info.get("max_tokens")
        return window if isinstance(window, int) and window > 0 else None

    def count_tokens(self, text: str) -> int:
        """``text``'s tokens with LiteLLM's counter for this model (its tokenizer when LiteLLM
        knows one, else its default)."""
        litellm = self._litellm = self._litellm or import_litellm()
        return int(litellm.token_counter(model=self.settings.model, text=text))

    def complete(self, request: ModelRequest) -> ModelResponse:
        messages, tools = request.messages, request.tools
        litellm = self._litellm = self._litellm or import_litellm()
        import openai  # installed with litellm; its errors are the base of LiteLLM's

        transient = (
            litellm.RateLimitError,
            litellm.APIConnectionError,
            litellm.Timeout,
            litellm.ServiceUnavailableError,
            litellm.InternalServerError,
        )
        deadline = time.monotonic() + self.settings.deadline_s
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            try:
                raw = litellm.completion(**self._request(messages, tools, timeout_s=remaining))
            except transient as error:
                reason = self._describe(error)
                # Exponential backoff with jitter spreads the retries of many conversations;
                # the provider's Retry-After, when it sends one, is the least we wait.
                asked = _retry_after(error)
                wait = max(
                    min(30.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random()), asked or 0
                )
                left = deadline - time.monotonic()
                if attempt > self.settings.max_retries:
                    raise ModelError(
                        f"model {self.name} failed after {attempt} attempts: {reason}"
                    ) from None
                if wait >= left:
                    if asked:
                        reason += f" (it asked to wait {asked:g} s)"
                    raise ModelError(
                        f"model {self.name} gave no usable answer within its deadline of "
                        f"{self.settings.deadline_s:g} s ({attempt} attempt"
                        f"{'s' if attempt > 1 else ''}): {reason}"
                    ) from None
                self.on_retry(
                    f"model {self.name}: {reason}; retrying in {wait:.1f} s"
                    f"{' as the provider asked' if asked else ''} "
                    f"(attempt {attempt + 1} of {self.settings.max_retries + 1})"
                )
                self._sleep(wait)
                continue
            except litellm.ContextWindowExceededError as error:
                raise ContextWindowExceeded(
                    f"model {self.name} refused the request: its context window is exceeded "
                    f"({self._describe(error)})"
                ) from None
            except litellm.exceptions.AuthenticationError as error:
                raise ModelError(
                    f"model {self.name}: authentication failed ({self._describe(error)}); "
                    "check TREADLE_API_KEY"
                ) from None
            except openai.OpenAIError as error:  # base of every provider error LiteLLM raises
                if _says_context_exceeded(error):
                    raise ContextWindowExceeded(
                        f"model {self.name} refused the request: its context window is "
                        f"exceeded ({self._describe(error)})"
                    ) from None
                raise ModelError(
                    f"model {self.name} refused the request: {self._describe(error)}"
                ) from None
            try:
                return self._response(litellm, raw)
            except ModelError:
                raise
            except Exception as error:  # a shape nobody foresaw: still the model's error
                raise self._bad_response(raw, f"{type(error).__name__}: {error}") from None

    def _describe(self, error: Exception) -> str:
        """What went wrong, in words: no exception class names or Python object reprs."""
        where = self.settings.base_url or "the provider"
        text = _short(error)
        if "Expecting value" in text or "Received response -" in str(error):
            return (
                f"{where} answered with a body that is not JSON (not an OpenAI-compatible answer)"
            )
        if type(error).__name__ == "Timeout" or "timed out" in text.lower():
            return f"no answer from {where} in time"
        if text.rstrip(".").lower() in ("connection error", "connection refused"):
            return f"the connection to {where} failed or was cut before an answer"
        status = getattr(error, "status_code", None)
        if type(error).__name__ == "RateLimitError":
            return f"rate limited by {where} (HTTP 429): {text}"
        return f"HTTP {status} from {where}: {text}" if isinstance(status, int) else text

    def _request(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        timeout = self.settings.timeout_s
        if timeout_s is not None:  # never wait past the call's deadline
            timeout = max(0.001, min(timeout, timeout_s))
        request: dict[str, Any] = {
            "model": self.settings.model,
            "messages": list(messages),
            "timeout": timeout,
            "num_retries": 0,  # retries are ours, so backoff and counting are in one place
        }
        if tools:
            request["tools"] = list(tools)
        if self.settings.base_url:
            request["api_base"] = self.settings.base_url
        if self.settings.api_key:
            request["api_key"] = self.settings.api_key
        elif self.settings.base_url:
            # Local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) take any key, but the
            # client refuses to send a request without one.
            request["api_key"] = "no-key"
        if self.settings.temperature is not None:
            request["temperature"] = self.settings.temperature
        return request

    def _response(self, litellm: Any, raw: Any) -> ModelResponse:
        """The response as the runtime's type; a ModelError (raw kept) for what cannot be one."""
        choices = getattr(raw, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        if message is None:
            raise self._bad_response(raw, 'it has no choice to read ("choices" is empty)')
        calls = []
        for number, call in enumerate(getattr(message, "tool_calls", None) or (), start=1):
            function = getattr(call, "function", None)
            name = getattr(function, "name", None)
            call_id = getattr(call, "id", None)
            if not isinstance(call_id, str) or not call_id.strip():
                raise self._bad_response(raw, f"tool call {number} ({name}) has an empty id")
            if not isinstance(name, str) or not name:
                raise self._bad_response(raw, f"tool call {number} ({call_id}) has no tool name")
            arguments = getattr(function, "arguments", None)
            calls.append(
                ToolCall(
                    id=storable_text(call_id),
                    name=storable_text(name),
                    arguments=storable_text(
                        arguments
                        if isinstance(arguments, str)
                        else ""
                        if arguments is None
                        else json.dumps(arguments)
                    ),
                )
            )
        usage = getattr(raw, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=raw) or 0.0)
        except Exception:  # unknown model or price: cost is unknown, not an error
            cost = 0.0
        response_id = getattr(raw, "id", None)
        reasoning = getattr(message, "reasoning_content", None)
        content = getattr(message, "content", None)
        return ModelResponse(
            # The id only groups one response's calls: a provider that sends none gets one.
            id=storable_text(response_id)
            if isinstance(response_id, str) and response_id
            else f"response-{uuid.uuid4().hex[:12]}",
            text=storable_text(content) if isinstance(content, str) else "",
            reasoning=storable_text(reasoning)
            if isinstance(reasoning, str) and reasoning
            else None,
            tool_calls=tuple(calls),
            usage=TokenUsage(
                model=self.settings.model,
                prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                cost_usd=cost,
            ),
        )

    def _bad_response(self, raw: Any, problem: str) -> ModelError:
        return ModelError(
            f"model {self.name} sent a response the runtime cannot use: {problem}",
            raw=raw_text(raw),
        )


def _says_context_exceeded(error: Exception) -> bool:
    """A 400 whose error code or text says the prompt is too long (a provider LiteLLM did not
    map to ``ContextWindowExceededError``)."""
    if getattr(error, "status_code", None) != 400:
        return False
    body = getattr(error, "body", None)
    code = body.get("code") if isinstance(body, dict) else None
    return code == "context_length_exceeded" or "context_length_exceeded" in str(error)


def raw_text(raw: Any) -> str:
    """A response as JSON text for the user to read (cut at ``RAW_RESPONSE_LIMIT``)."""
    try:
        text = raw.model_dump_json() if hasattr(raw, "model_dump_json") else str(raw)
    except Exception:  # a half-built response object: its repr is all there is
        text = repr(raw)
    text = storable_text(text)
    return text if len(text) <= RAW_RESPONSE_LIMIT else text[:RAW_RESPONSE_LIMIT] + "…(cut)"


def _retry_after(error: Exception) -> float | None:
    """The seconds a provider asked us to wait (Retry-After: seconds or an HTTP date)."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) or getattr(error, "litellm_response_headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, seconds) if seconds == seconds else None  # NaN is no answer


_PREFIX = re.compile(r"^\s*(?:litellm\.)?\w+(?:Error|Exception)\s*(?::|\s-)\s*")
_REPR = re.compile(r",?\s*\w[\w ]*-\s*<[^<>]*(?:<[^<>]*>[^<>]*)*>|<[^<>]*(?:<[^<>]*>[^<>]*)*>")


def _short(error: Exception) -> str:
    """The first line of the message, without the class-name prefixes LiteLLM stacks up
    ("litellm.InternalServerError: InternalServerError: OpenAIException - ...") or reprs."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    while (stripped := _PREFIX.sub("", first, count=1)) != first:
        first = stripped
    first = _REPR.sub("", first).strip(" ,")
    return storable_text(first[:300]) or "no details given"
