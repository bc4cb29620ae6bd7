"""Settings are data in ``treadle.api`` (validated without the runtime); the runtime builds the
same agent from them as before, and the names the runtime exported still work."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from treadle.api import (
    BUILTIN_TOOL_NAMES,
    DEFAULT_SYSTEM_PROMPT,
    ConfirmationPolicy,
    ConversationSettings,
    ConversationStatus,
    CreateConversation,
)
from treadle.runtime import confirmation, settings, status
from treadle.runtime.llm.base import ModelRequest
from treadle.runtime.llm.scripted import ScriptedModel
from treadle.runtime.tools import BUILTIN_TOOLS


def test_the_api_names_the_runtimes_builtin_tools_in_order() -> None:
    assert tuple(BUILTIN_TOOLS) == BUILTIN_TOOL_NAMES


def test_old_homes_reexport_the_same_objects() -> None:
    assert settings.ConversationSettings is ConversationSettings
    assert confirmation.ConfirmationPolicy is ConfirmationPolicy
    assert status.ConversationStatus is ConversationStatus


def test_unknown_or_repeated_tools_are_refused_naming_the_builtins(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"unknown tool.*'nope'.*terminal, file_editor"):
        ConversationSettings.scripted_inline([], tmp_path, tools=("terminal", "nope"))
    with pytest.raises(ValidationError, match="think named more than once"):
        ConversationSettings.scripted_inline([], tmp_path, tools=("think", "think"))
    body = {"id": "a/b", "settings": {"model": {"kind": "litellm"}, "workspace": "/w"}}
    with pytest.raises(ValidationError, match=r"conversation id 'a/b'.*is not allowed"):
        CreateConversation.model_validate(body)


def test_the_runtime_builds_the_agent_the_settings_describe(tmp_path: Path) -> None:
    chosen = ConversationSettings.scripted_inline(
        [{"text": "hi"}], tmp_path, tools=("think", "finish"), system_prompt="be brief"
    )
    stored = ConversationSettings.from_metadata({"settings": chosen.to_metadata()})
    assert stored == chosen
    agent = settings.build_agent(stored)
    assert [tool["function"]["name"] for tool in agent.tools.openai_schemas()] == [
        "think",
        "finish",
    ]
    assert agent.system_prompt == "be brief"
    assert isinstance(agent.model, ScriptedModel)
    assert agent.model.complete(ModelRequest([], [])).text == "hi"
    default = settings.build_agent(ConversationSettings.scripted_inline([], tmp_path))
    assert default.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert len(default.tools.openai_schemas()) == len(BUILTIN_TOOL_NAMES)
    agent.tools.close()
    default.tools.close()
