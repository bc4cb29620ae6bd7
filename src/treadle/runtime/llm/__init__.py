"""Models: the ``LanguageModel`` interface, the real provider's clients (LiteLLM for named
providers, ``OpenAICompatibleModel`` for OpenAI-compatible base URLs: ``provider_model``
chooses), a scripted model."""

from treadle.runtime.llm.base import (
    LanguageModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    close_model,
)
from treadle.runtime.llm.choice import provider_model
from treadle.runtime.llm.litellm_model import LiteLLMModel
from treadle.runtime.llm.openai_model import OpenAICompatibleModel
from treadle.runtime.llm.provider import ModelEnvironment, ModelSettings, ProviderModel
from treadle.runtime.llm.scripted import ScriptedModel

__all__ = [
    "LanguageModel",
    "LiteLLMModel",
    "ModelEnvironment",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OpenAICompatibleModel",
    "ProviderModel",
    "ScriptedModel",
    "ToolCall",
    "close_model",
    "provider_model",
]
