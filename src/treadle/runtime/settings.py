"""A conversation's settings (model, tools, confirmation policy, workspace), stored with it in
the store's metadata so any process can reopen and continue it. Never holds an API key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from treadle.runtime.agent import DEFAULT_SYSTEM_PROMPT, Agent
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.llm import LiteLLMModel, ModelSettings, ScriptedModel
from treadle.runtime.llm.base import LanguageModel
from treadle.runtime.tools import BUILTIN_TOOLS, builtin_tools

SETTINGS_KEY = "settings"
"""Where the settings live in ``ConversationInfo.metadata``."""


class ModelChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["litellm", "scripted"]
    model: str | None = None
    base_url: str | None = None
    script: str | None = Field(default=None, description="Path of the scripted model's JSON file")

    def build(self) -> LanguageModel:
        if self.kind == "scripted":
            return ScriptedModel.from_file(self.script or "")
        # The key comes from the environment of whichever process runs the conversation.
        return LiteLLMModel(ModelSettings.from_env(model=self.model, base_url=self.base_url))


class ConversationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelChoice
    tools: tuple[str, ...] = tuple(BUILTIN_TOOLS)
    confirmation: ConfirmationPolicy = ConfirmationPolicy.NEVER
    workspace: str
    system_prompt: str = DEFAULT_SYSTEM_PROMPT

    @classmethod
    def scripted(
        cls, script: str | Path, workspace: str | Path, **fields: Any
    ) -> ConversationSettings:
        return cls(
            model=ModelChoice(kind="scripted", script=str(Path(script).resolve())),
            workspace=str(Path(workspace).resolve()),
            **fields,
        )

    @classmethod
    def litellm(
        cls, model: str, workspace: str | Path, base_url: str | None = None, **fields: Any
    ) -> ConversationSettings:
        return cls(
            model=ModelChoice(kind="litellm", model=model, base_url=base_url),
            workspace=str(Path(workspace).resolve()),
            **fields,
        )

    def build_agent(self, model: LanguageModel | None = None) -> Agent:
        return Agent(
            model=model or self.model.build(),
            tools=builtin_tools(self.tools),
            system_prompt=self.system_prompt,
        )

    def to_metadata(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> ConversationSettings | None:
        data = metadata.get(SETTINGS_KEY)
        return None if data is None else cls.model_validate(data)
