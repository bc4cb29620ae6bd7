"""A model that replays responses from a JSON script: the demo's and the tests' model.

It finds its place from the conversation itself: the number of model responses already on its
active path (``responses_before``, which the runtime counts from the stored events, so that a condensation,
which shrinks what the model is sent, does not move it), else the number of assistant messages
it is sent. A conversation reopened in another process continues where it stopped. A
condenser's summary request is answered from the script's ``summaries`` (or a fixed text),
never with one of its responses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from treadle.data.settings import ScriptedCall as ScriptedCall  # the script's data
from treadle.data.settings import ScriptedResponse
from treadle.events.json_limits import load_json
from treadle.events.model import TokenUsage
from treadle.files import read_regular_file
from treadle.runtime.llm.base import ModelError, ModelRequest, ModelResponse, ToolCall

MAX_SCRIPT_BYTES = 16 * 1024 * 1024
"""A script file larger than this is refused unread (a path like /dev/zero must not fill memory)."""


DEFAULT_SUMMARY = "Summary of the earlier steps (scripted model): the work so far is done."


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    responses: list[ScriptedResponse]
    summaries: list[str] = []
    """The texts of the summaries the condenser asks for, in order (then a fixed text)."""


SCRIPT_SHAPE = (
    'a script is {"responses": [{"text": ...} or {"tool_calls": [{"name": ..., "arguments": '
    '{...}}]}, ...], "summaries": [...]}'
)


def _where(error: ValidationError, shown: int = 3) -> str:
    """Pydantic's problems as one line: where each is and what is wrong, then the shape."""
    problems = [
        f"{'.'.join(str(part) for part in item['loc']) or 'the file'}: {item['msg']}"
        for item in error.errors()[:shown]
    ]
    more = f" (and {error.error_count() - shown} more)" if error.error_count() > shown else ""
    return "; ".join(problems) + more + f"; {SCRIPT_SHAPE}"


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
            # Treadle's JSON (JsonLimitError, a ValueError): a file nesting 100,000 deep ended
            # json.loads in a RecursionError.
            data = load_json(read_regular_file(path, MAX_SCRIPT_BYTES).decode("utf-8"))
            return cls(Script.model_validate(data), source=str(path))
        except ValidationError as error:  # JSON of another shape: say where, and the shape
            raise ModelError(f"cannot read model script {path}: {_where(error)}") from None
        except (OSError, ValueError) as error:  # FileRefused, bad UTF-8 or JSON
            raise ModelError(f"cannot read model script {path}: {error}") from None

    @classmethod
    def from_responses(
        cls,
        responses: Sequence[ScriptedResponse | dict[str, Any]],
        summaries: Sequence[str] = (),
    ) -> ScriptedModel:
        try:
            return cls(
                Script.model_validate({"responses": list(responses), "summaries": list(summaries)})
            )
        except ValidationError as error:
            raise ModelError(f"bad scripted responses: {_where(error)}") from None

    @property
    def name(self) -> str:
        return f"scripted:{self.source}"

    def complete(self, request: ModelRequest) -> ModelResponse:
        """A step's request: the response at the request's place; a summary's: the script's
        next summary."""
        if request.purpose == "summary":
            return self._summary(request.messages, request.summaries_before)
        return self._response(request.messages, request.place)

    def _summary(self, messages: Sequence[dict[str, Any]], number: int) -> ModelResponse:
        """The script's ``number``-th summary, or a fixed text past its end."""
        summaries = self.script.summaries
        text = summaries[number] if number < len(summaries) else DEFAULT_SUMMARY
        prompt_chars = sum(len(json.dumps(message)) for message in messages)
        return ModelResponse(
            id=f"scripted-summary-{number}",
            text=text,
            usage=TokenUsage(
                model=self.name, prompt_tokens=prompt_chars // 4, completion_tokens=len(text) // 4
            ),
        )

    def _response(self, messages: Sequence[dict[str, Any]], answered: int) -> ModelResponse:
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
