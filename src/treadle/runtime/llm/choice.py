"""Which client calls a provider: an ``openai/NAME`` model with a base URL (an OpenAI-compatible
server: vLLM, llama.cpp, Ollama, a proxy) goes through ``OpenAICompatibleModel`` (plain HTTP
with httpx); any other (a named provider such as ``anthropic/...``, ``gpt-4o`` on
OpenAI's own endpoint) through LiteLLM. Both keep the same guarantees (``provider.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from treadle.runtime.llm.litellm_model import LiteLLMModel
from treadle.runtime.llm.openai_model import OpenAICompatibleModel, speaks_openai
from treadle.runtime.llm.provider import ModelSettings, ProviderModel, RetryNotice


def provider_model(
    settings: ModelSettings,
    *,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: RetryNotice | None = None,
) -> ProviderModel:
    """The client for ``settings``: ``OpenAICompatibleModel`` for ``openai/NAME`` at a base
    URL, ``LiteLLMModel`` otherwise. Its owner closes it (``close``)."""
    if speaks_openai(settings.model, settings.base_url):
        return OpenAICompatibleModel(settings, sleep=sleep, on_retry=on_retry)
    return LiteLLMModel(settings, sleep=sleep, on_retry=on_retry)
