"""The one small model interface: a ``ModelRequest`` in (messages, tool schemas, what the
request is for and where it stands on the path), one ``ModelResponse`` out.

Everything the runtime needs from a provider is here; the provider clients (LiteLLM, the
OpenAI-compatible one: ``provider.py``), the scripted model and the recorded model (replay)
implement it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from treadle.errors import TreadleError
from treadle.events.model import TokenUsage


class ModelError(TreadleError):
    """The model could not answer (after retries), or answered with something the runtime
    cannot turn into valid events; the conversation records it as ERROR.

    ``raw`` keeps the response as received (JSON text, may be cut) when there was one, so the
    user can see what the provider actually sent."""

    def __init__(self, message: str, *, raw: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw


class ContextWindowExceeded(ModelError):
    """The provider refused the request because its prompt is longer than the model's
    context window (LiteLLM's ``ContextWindowExceededError``, or a 400 saying
    ``context_length_exceeded``): condensing may help, retrying as it is never will."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call as the model sent it; ``arguments`` is the raw string, parsed later."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ModelResponse:
    id: str
    text: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)


ModelPurpose = Literal["step", "summary"]
"""What a request is for: a step of the run (the model may call tools), or a condensation's
summary (no tools)."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call: what is sent, and what the runtime knows of its place, for the models
    that answer by it (the scripted model, a replay's recorded one); a provider's model uses
    ``messages`` and ``tools`` only."""

    messages: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]] = ()
    purpose: ModelPurpose = "step"
    responses_before: int | None = None
    """The model responses already on the active path, those a condensation forgot included
    (None: not known; ``place`` counts the assistant messages sent)."""
    summaries_before: int = 0
    """The condensations already on the path (a summary request's number)."""

    @property
    def place(self) -> int:
        """How many responses the model already gave on the path: ``responses_before`` when
        the runtime says (counted by ``ResponseCounter``), else the assistant messages sent."""
        if self.responses_before is not None:
            return self.responses_before
        return sum(1 for message in self.messages if message.get("role") == "assistant")


class LanguageModel(Protocol):
    """Anything that answers chat messages (OpenAI format) with text or tool calls."""

    @property
    def name(self) -> str: ...

    def complete(self, request: ModelRequest) -> ModelResponse: ...


class ResponseCounter:
    """The model responses on a path, counted by the events they made, as the projection
    batches them (PROJECT-BATCH): an agent message is one; so is each run of consecutive
    actions with one response id. Never by distinct response ids: a provider may repeat
    one, and the recorded and scripted models answer by this count. Fed each model-visible
    event of the path in order (``add``); a condensation closes a batch too."""

    __slots__ = ("_batch", "count")

    def __init__(self) -> None:
        self.count = 0
        self._batch: str | None = None
        """The response id of the batch the last event belongs to (None: not an action)."""

    def add(self, event: Any) -> None:
        kind = event.kind
        if kind == "action":
            response = event.llm_response_id
            if response != self._batch:
                self.count += 1
            self._batch = response
            return
        if kind == "message" and event.source == "agent":
            self.count += 1
        self._batch = None


def close_model(model: object) -> None:
    """Free what ``model`` holds (a provider client's connection pool), for its owner: a model
    with nothing to free (scripted, recorded) has no ``close``. Closing twice is harmless."""
    close = getattr(model, "close", None)
    if callable(close):
        close()
