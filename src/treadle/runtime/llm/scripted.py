"""A model that replays responses from a JSON script: the demo's and the tests' model.

It finds its place from the conversation itself (the number of assistant messages, i.e. model
responses, already in the messages), so a conversation reopened in another process continues where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from treadle.api.settings import ScriptedCall as ScriptedCall  # the script's data
from treadle.api.settings import ScriptedResponse
from treadle.events.model import TokenUsage
from treadle.files import read_regular_file
from treadle.runtime.llm.base import ModelError, ModelResponse, ToolCall

MAX_SCRIPT_BYTES = 16 * 1024 * 1024
"""A script file larger than this is refused unread (a path like /dev/zero must not fill memory)."""


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    responses: list[ScriptedResponse]


class ScriptedModel:
    """Answers the n-th model call with the n-th scripted response."""

    def __init__(self, script: Script, *, source: str = "inline") -> None:
        self.script = script
        self.source = source

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """The script in ``path``: a regular file of at most ``MAX_SCRIPT_BYTES``."""
        path = Path(path)
        try:
            data = json.loads(read_regular_file(path, MAX_SCRIPT_BYTES).decode("utf-8"))
            return cls(Script.model_validate(data), source=str(path))
        except (OSError, ValueError) as error:  # FileRefused, bad UTF-8, JSON or shape
            raise ModelError(f"cannot read model script {path}: {error}") from None

    @classmethod
    def from_responses(
        cls, responses: Sequence[ScriptedResponse | dict[str, Any]]
    ) -> ScriptedModel:
        try:
            return cls(Script.model_validate({"responses": list(responses)}))
        except ValidationError as error:
            raise ModelError(f"bad scripted responses: {error}") from None

    @property
    def name(self) -> str:
        return f"scripted:{self.source}"

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        answered = sum(1 for message in messages if message.get("role") == "assistant")
        if answered >= len(self.script.responses):
            raise ModelError(
                f"the script has {len(self.script.responses)} responses and response {answered + 1} was asked for"
            )
        scripted = self.script.responses[answered]
        calls = tuple(
            ToolCall(
                id=call.id or f"call-{answered}-{index}",
                name=call.name,
                arguments=call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments),
            )
            for index, call in enumerate(scripted.tool_calls)
        )
        prompt_chars = sum(len(json.dumps(message)) for message in messages)
        return ModelResponse(
            id=scripted.id or f"scripted-response-{answered}",
            text=scripted.text,
            reasoning=scripted.reasoning,
            tool_calls=calls,
            usage=TokenUsage(
                model=self.name,
                prompt_tokens=prompt_chars // 4,  # a rough stand-in so summaries show numbers
                completion_tokens=(len(scripted.text) + sum(len(c.arguments) for c in calls)) // 4,
            ),
        )
