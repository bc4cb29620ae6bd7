"""A conversation's settings (model, tools, confirmation policy, workspace), stored with it in
the store's metadata so any process can reopen and continue it. Never holds an API key.
``SettingsPolicy`` is what a process lets settings reach (a server: its operator's limits)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from treadle.errors import TreadleError
from treadle.runtime.agent import DEFAULT_SYSTEM_PROMPT, Agent
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.llm import LiteLLMModel, ModelSettings, ScriptedModel
from treadle.runtime.llm.base import LanguageModel, ModelError
from treadle.runtime.llm.scripted import ScriptedResponse
from treadle.runtime.secrets import MIN_SECRET_LENGTH, Secrets
from treadle.runtime.tools import BUILTIN_TOOLS, builtin_tools

SETTINGS_KEY = "settings"
"""Where the settings live in ``ConversationInfo.metadata``."""


class SettingsError(TreadleError, ValueError):
    """Settings ask for something this process does not allow (a path outside its root)."""


@dataclass(frozen=True)
class SettingsPolicy:
    """What settings may reach in this process. The default trusts them: ``treadle run`` runs
    the user's own settings. A server's settings come from its clients, so it passes
    ``trusted=False`` with its operator's limits."""

    trusted: bool = True
    workspace_root: Path | None = None
    """Workspaces (and, untrusted, script files) only inside this folder, by real path."""
    key_base_urls: tuple[str, ...] = ()
    """Untrusted: base URLs besides the provider's own that may receive this process's key."""
    masked: tuple[str, ...] = field(default=(), repr=False)
    """Values masked in every conversation this process opens, never given to a tool (a
    server's client API keys: the agent's bash could still read them from a file)."""

    def register_masked(self, secrets: Secrets) -> Secrets:
        """``secrets`` with the ``masked`` values registered (mask only, not exported)."""
        for number, value in enumerate(self.masked, start=1):
            name = f"TREADLE_SERVER_API_KEY_{number}"
            # Shorter values cannot be masked without garbling ordinary output.
            if name not in secrets and len(value) >= MIN_SECRET_LENGTH:
                secrets.add(name, value, export=False)
        return secrets

    def check_script(self, script: str) -> Path:
        """The script file settings name, if this process may open it (untrusted: its real
        path, inside ``workspace_root``; relative paths start there)."""
        if self.trusted:
            return Path(script)
        real = _real_inside(Path(script), self.workspace_root) if self.workspace_root else None
        if real is None:
            # Said the same whether or not the path exists: the answer tells a client nothing.
            raise SettingsError(
                "a scripted model on this server takes its responses inline "
                '({"kind": "scripted", "responses": [...]}); a script file is accepted only '
                "inside the server's --workspace-root"
            )
        return real


def _real_inside(path: Path, root: Path) -> Path | None:
    """The real path of ``path`` (relative: from ``root``) when it lies inside ``root``."""
    try:
        real = Path(os.path.realpath(root / path))
        real_root = Path(os.path.realpath(root))
    except (OSError, ValueError):  # a NUL byte, a name too long
        return None
    return real if real == real_root or real.is_relative_to(real_root) else None


class ModelChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["litellm", "scripted"]
    model: str | None = None
    base_url: str | None = None
    script: str | None = Field(
        default=None, description="Path of the scripted model's JSON file (the CLI's way)"
    )
    responses: tuple[ScriptedResponse, ...] | None = Field(
        default=None,
        description="The scripted model's responses inline (a script file's `responses`); "
        "a server takes scripted models this way",
    )

    @model_validator(mode="after")
    def _fields_of_the_kind(self) -> ModelChoice:
        if self.kind == "scripted":
            if (self.script is None) == (self.responses is None):
                raise ValueError("a scripted model needs exactly one of responses or script")
        elif self.script is not None or self.responses is not None:
            raise ValueError("script and responses apply to a scripted model only")
        return self

    def build(self, policy: SettingsPolicy | None = None) -> LanguageModel:
        policy = policy or SettingsPolicy()
        if self.kind == "scripted":
            if self.responses is not None:
                return ScriptedModel.from_responses(self.responses)
            try:
                path = policy.check_script(self.script or "")
            except SettingsError as error:
                raise ModelError(str(error)) from None
            return ScriptedModel.from_file(path)
        # The key comes from the environment of whichever process runs the conversation;
        # untrusted settings get it only for the base URLs its operator allowed.
        return LiteLLMModel(
            ModelSettings.from_env(
                model=self.model,
                base_url=self.base_url,
                key_base_urls=None if policy.trusted else policy.key_base_urls,
            )
        )


class ConversationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelChoice
    tools: tuple[str, ...] = tuple(BUILTIN_TOOLS)
    confirmation: ConfirmationPolicy = ConfirmationPolicy.NEVER
    workspace: str
    system_prompt: str = DEFAULT_SYSTEM_PROMPT

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, tools: tuple[str, ...]) -> tuple[str, ...]:
        # Refused with the settings (a 422 from the API), not later when the agent is built.
        unknown = [name for name in tools if name not in BUILTIN_TOOLS]
        if unknown:
            raise ValueError(
                f"unknown tool(s) {', '.join(map(repr, unknown))}; the built-in tools are "
                f"{', '.join(BUILTIN_TOOLS)}"
            )
        twice = sorted({name for name in tools if tools.count(name) > 1})
        if twice:
            raise ValueError(f"tool(s) {', '.join(twice)} named more than once: name each once")
        return tools

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
    def scripted_inline(
        cls, responses: Sequence[dict[str, Any]], workspace: str | Path, **fields: Any
    ) -> ConversationSettings:
        """A scripted model whose responses travel with the settings (how a server takes one)."""
        return cls(
            model=ModelChoice(kind="scripted", responses=tuple(responses)),
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

    def build_agent(
        self, model: LanguageModel | None = None, policy: SettingsPolicy | None = None
    ) -> Agent:
        return Agent(
            model=model or self.model.build(policy),
            tools=builtin_tools(self.tools),
            system_prompt=self.system_prompt,
        )

    def to_metadata(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> ConversationSettings | None:
        data = metadata.get(SETTINGS_KEY)
        return None if data is None else cls.model_validate(data)
