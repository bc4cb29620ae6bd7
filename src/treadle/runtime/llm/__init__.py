"""Models: the ``LanguageModel`` interface, LiteLLM for real providers, a scripted model."""

from treadle.runtime.llm.base import (
    LanguageModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
)
from treadle.runtime.llm.litellm_model import LiteLLMModel, ModelEnvironment, ModelSettings
from treadle.runtime.llm.scripted import ScriptedModel

__all__ = [
    "LanguageModel",
    "LiteLLMModel",
    "ModelEnvironment",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "ScriptedModel",
    "ToolCall",
]
