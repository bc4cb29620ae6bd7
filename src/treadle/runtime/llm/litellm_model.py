"""The real model: any provider LiteLLM knows, or any OpenAI-compatible base URL.

LiteLLM is imported on first use (it is slow to import) with its price map read locally, so it
works offline. Rate limits and transient errors are retried with exponential backoff.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from treadle.events.model import TokenUsage
from treadle.runtime.llm.base import ModelError, ModelResponse, ToolCall


@dataclass(frozen=True)
class ModelSettings:
    """How to reach the model. The API key is used for calls only: never stored or logged."""

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in a repr, log or traceback
    max_retries: int = 4
    timeout_s: float = 120.0
    temperature: float | None = None

    @classmethod
    def from_env(
        cls,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        key_base_urls: Collection[str] | None = None,
    ) -> ModelSettings:
        """Options first, then TREADLE_MODEL / TREADLE_BASE_URL / TREADLE_API_KEY.

        ``key_base_urls`` (a server passes its operator's list): the base URLs this process's
        key may go to besides the provider's own endpoint and TREADLE_BASE_URL; any other
        ``base_url`` gets no key. None: the key goes wherever ``base_url`` says (the user's run).
        """
        chosen = model or os.environ.get("TREADLE_MODEL")
        if not chosen:
            raise ModelError(
                "no model given: pass --model (e.g. openai/gpt-4o-mini, or openai/NAME with "
                "--base-url for an OpenAI-compatible server) or set TREADLE_MODEL"
            )
        operator_url = os.environ.get("TREADLE_BASE_URL") or None
        key = api_key or os.environ.get("TREADLE_API_KEY")
        if base_url and key_base_urls is not None:
            allowed = {normalize_base_url(url) for url in [*key_base_urls, operator_url] if url}
            if normalize_base_url(base_url) not in allowed:
                key = None  # a base URL the operator did not allow never sees the key
        return cls(model=chosen, base_url=base_url or operator_url, api_key=key)

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


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class LiteLLMModel:
    """``LanguageModel`` over ``litellm.completion``."""

    def __init__(self, settings: ModelSettings, *, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings
        self._sleep = sleep
        self._litellm: Any = None

    @property
    def name(self) -> str:
        return self.settings.model

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        litellm = self._litellm = self._litellm or _import_litellm()
        import openai  # installed with litellm; its errors are the base of LiteLLM's

        transient = (
            litellm.RateLimitError,
            litellm.APIConnectionError,
            litellm.Timeout,
            litellm.ServiceUnavailableError,
            litellm.InternalServerError,
        )
        attempt = 0
        while True:
            try:
                raw = litellm.completion(**self._request(messages, tools))
                return self._response(litellm, raw)
            except transient as error:
                attempt += 1
                if attempt > self.settings.max_retries:
                    raise ModelError(
                        f"model {self.name} failed after {attempt} attempts: {_short(error)}"
                    ) from None
                # Exponential backoff with jitter: spreads retries of many conversations.
                self._sleep(min(30.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random()))
            except litellm.exceptions.AuthenticationError as error:
                raise ModelError(
                    f"model {self.name}: authentication failed ({_short(error)}); check TREADLE_API_KEY"
                ) from None
            except openai.OpenAIError as error:  # base of every provider error LiteLLM raises
                raise ModelError(
                    f"model {self.name} refused the request: {_short(error)}"
                ) from None

    def _request(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.settings.model,
            "messages": list(messages),
            "timeout": self.settings.timeout_s,
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
        choice = raw.choices[0].message
        calls = tuple(
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "")
            for call in (choice.tool_calls or ())
        )
        usage = getattr(raw, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=raw) or 0.0)
        except Exception:  # unknown model or price: cost is unknown, not an error
            cost = 0.0
        return ModelResponse(
            id=raw.id,
            text=choice.content or "",
            reasoning=getattr(choice, "reasoning_content", None) or None,
            tool_calls=calls,
            usage=TokenUsage(
                model=self.settings.model,
                prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                cost_usd=cost,
            ),
        )


def _short(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text[:300]
