"""The real model through LiteLLM: any provider LiteLLM knows by name (``anthropic/...``,
``gpt-4o`` on OpenAI's own endpoint, ...). An ``openai/NAME`` model with a base URL (vLLM,
llama.cpp, Ollama, a proxy) goes through the leaner ``OpenAICompatibleModel`` instead
(``treadle.runtime.llm.choice``); both share the retry policy, the wording of errors and the
reading of responses (``treadle.runtime.llm.provider``).

LiteLLM is imported on first use (it is slow to import) with its price map read locally, so it
works offline. Its knowledge of models (windows, prices, tokenizers) serves both clients.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from treadle.runtime.llm.base import ModelRequest, ModelResponse
from treadle.runtime.llm.model_map import is_priced, window_of
from treadle.runtime.llm.provider import (
    Failure,
    ProviderModel,
    call_with_retries,
    describe,
    read_response,
    retry_after,
    says_context_exceeded,
    short,
)


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


def litellm_context_window(model: str) -> int | None:
    """``model``'s input window in tokens from LiteLLM's model info; None when LiteLLM does not
    know the model (a local endpoint's own name)."""
    return window_of(litellm_model_info(model))


def litellm_model_info(model: str) -> Mapping[str, Any] | None:
    """LiteLLM's model info of ``model``; None when it does not know it."""
    litellm = import_litellm()
    try:
        info = litellm.get_model_info(model)
    except Exception:  # not mapped: LiteLLM raises for every model it does not know
        return None
    return info if isinstance(info, Mapping) else None


class LiteLLMPricer:
    """A response's cost in USD from LiteLLM's price map for ``model`` (0.0 when the map has
    no price for it). Whether it has one is asked once: a model it does not know (a local
    endpoint's own name) costs no LiteLLM call per response."""

    def __init__(
        self,
        model: str,
        model_info: Callable[[str], Mapping[str, Any] | None] = litellm_model_info,
    ) -> None:
        self.model = model
        self._model_info = model_info
        self._priced: bool | None = None

    def __call__(self, raw: Any) -> float:
        if self._priced is None:
            self._priced = is_priced(self._model_info(self.model))
        if not self._priced:
            return 0.0
        litellm = import_litellm()
        return float(litellm.completion_cost(completion_response=raw, model=self.model) or 0.0)


class LiteLLMModel(ProviderModel):
    """``LanguageModel`` over ``litellm.completion``."""

    _litellm: Any = None

    def context_window(self) -> int | None:
        return litellm_context_window(self.settings.model)

    def count_tokens(self, text: str) -> int:
        """``text``'s tokens with LiteLLM's counter for this model (its tokenizer when LiteLLM
        knows one, else its default)."""
        litellm = self._litellm = self._litellm or import_litellm()
        return int(litellm.token_counter(model=self.settings.model, text=text))

    def complete(self, request: ModelRequest) -> ModelResponse:
        litellm = self._litellm = self._litellm or import_litellm()
        body = self._request(request)
        raw = call_with_retries(
            self,
            lambda timeout_s: litellm.completion(**body, timeout=timeout_s),
            lambda error: self._failure(litellm, error),
        )
        return read_response(
            self, raw, lambda response: litellm.completion_cost(completion_response=response)
        )

    def _failure(self, litellm: Any, error: Exception) -> Failure | None:
        """LiteLLM's error as one of the policy's kinds (None: not a provider's error)."""
        import openai  # installed with litellm; its errors are the base of LiteLLM's

        transient = (
            litellm.RateLimitError,
            litellm.APIConnectionError,
            litellm.Timeout,
            litellm.ServiceUnavailableError,
            litellm.InternalServerError,
            litellm.BadGatewayError,
        )
        if isinstance(error, transient):
            response = getattr(error, "response", None)
            headers = getattr(response, "headers", None) or getattr(
                error, "litellm_response_headers", None
            )
            return Failure("transient", self._describe(error), retry_after(headers))
        if isinstance(error, litellm.ContextWindowExceededError):
            return Failure("context", self._describe(error))
        if isinstance(error, litellm.exceptions.AuthenticationError):
            return Failure("auth", self._describe(error))
        if isinstance(error, openai.OpenAIError):  # base of every provider error LiteLLM raises
            body = getattr(error, "body", None)
            code = body.get("code") if isinstance(body, dict) else None
            status = getattr(error, "status_code", None)
            if says_context_exceeded(status, code, str(error)):  # one LiteLLM did not map
                return Failure("context", self._describe(error))
            return Failure("refused", self._describe(error))
        return None

    def _describe(self, error: Exception) -> str:
        """LiteLLM's error in the policy's words (``describe``)."""
        text = short(error)
        status = getattr(error, "status_code", None)
        return describe(
            self.settings.where,
            text,
            status=429
            if type(error).__name__ == "RateLimitError"
            else status
            if isinstance(status, int)
            else None,
            not_json="Expecting value" in text or "Received response -" in str(error),
            timed_out=type(error).__name__ == "Timeout" or "timed out" in text.lower(),
            cut=text.rstrip(".").lower() in ("connection error", "connection refused"),
        )

    def _request(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.settings.model,
            "messages": list(request.messages),
            "num_retries": 0,  # retries are ours, so backoff and counting are in one place
        }
        if request.tools:
            body["tools"] = list(request.tools)
        if self.settings.base_url:
            body["api_base"] = self.settings.base_url
        if self.settings.api_key:
            body["api_key"] = self.settings.api_key
        elif self.settings.base_url:
            # Local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) take any key, but the
            # client refuses to send a request without one.
            body["api_key"] = "no-key"
        if self.settings.temperature is not None:
            body["temperature"] = self.settings.temperature
        return body
