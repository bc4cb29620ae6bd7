"""The tool interface: arguments model, executor, result, the context a tool runs in, and the
typed error a bad call becomes (the agent turns it into an agent-error event for the model)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from treadle.errors import TreadleError
from treadle.events.model import ActionEvent, AgentErrorEvent, ObservationEvent
from treadle.runtime.interrupts import Interruption
from treadle.runtime.live_output import CallOutput, LiveOutput
from treadle.runtime.secrets import Secrets
from treadle.runtime.text import storable, storable_text
from treadle.runtime.tools.schema import parameters_schema
from treadle.runtime.workspace.base import Workspace

ToolCallErrorReason = Literal["unknown_tool", "invalid_arguments", "tool_error"]


class ToolCallError(TreadleError):
    """A call the model can fix: unknown tool, invalid arguments, or the tool's ValueError.

    ``message`` is written for the model (what was wrong, what to send instead); the agent
    records it as an ``AgentErrorEvent`` answering the call (``to_agent_error``).
    """

    def __init__(self, tool_name: str, reason: ToolCallErrorReason, message: str) -> None:
        self.tool_name = tool_name
        self.reason = reason
        self.message = message
        super().__init__(message)

    def to_agent_error(self, action: ActionEvent, **fields: Any) -> AgentErrorEvent:
        """The agent-error event answering ``action``; ``fields`` may set parent_id etc."""
        return AgentErrorEvent(
            tool_call_id=action.tool_call_id,
            tool_name=action.tool_name,
            action_id=action.id,
            error=storable_text(self.message),
            **fields,
        )


class ToolArguments(BaseModel):
    """Base of every tool's arguments model. Unknown parameters are refused, so a misspelt
    optional parameter is reported to the model instead of being silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returns; the agent records it as an ``ObservationEvent`` (``to_observation``).

    ``is_error`` means the tool could not do what was asked (e.g. a timeout), not that a command
    reported failure (that is in ``data``, e.g. ``exit_code``). ``ends_turn`` is set by ``finish``.
    """

    content: str
    is_error: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)
    ends_turn: bool = False
    image_urls: tuple[str, ...] = ()

    def to_observation(self, action: ActionEvent, **fields: Any) -> ObservationEvent:
        """The observation answering ``action`` (LINK-ID); ``fields`` may set parent_id etc.
        Text a tool produced from bytes (file names, command output) is made storable here."""
        return ObservationEvent(
            action_id=action.id,
            tool_call_id=action.tool_call_id,
            tool_name=action.tool_name,
            content=storable_text(self.content),
            is_error=self.is_error,
            data=storable(dict(self.data)),
            image_urls=tuple(storable_text(url) for url in self.image_urls),
            **fields,
        )


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Where and for whom a tool runs. Stateful tools (terminal, undo history, task list) keep
    their state per ``conversation_id`` (and workspace), so one tool instance can serve many."""

    workspace: Workspace
    secrets: Secrets = field(default_factory=Secrets)
    conversation_id: str = "default"
    interruption: threading.Event = field(default_factory=Interruption)
    """Set when the user interrupted the run: a tool stops what it does for this conversation
    as soon as it can (``Tool.interrupt`` is called once it is set)."""
    live_output: LiveOutput = field(default_factory=LiveOutput)
    """Who is told a call's output while it runs (the live view, the stream); never stored."""
    call: ActionEvent | None = None
    """The call being run (the agent sets it for each call): what its live output belongs to."""

    def open_live_output(self) -> CallOutput | None:
        """A feed for the running call's output so far (None: nobody listens); the tool
        closes it when the call ends."""
        return self.live_output.open(self.conversation_id, self.call, self.secrets)


ArgsT = TypeVar("ArgsT", bound=ToolArguments)


class Tool(ABC, Generic[ArgsT]):
    """A tool the model can call: a name, a description, an arguments model and an executor.

    Subclasses set the attributes below as class attributes (or per instance, for tools made at
    run time such as MCP tools) and implement ``run``. ``run`` raises ValueError for a call the
    model can fix; anything else is a real failure and propagates.
    """

    name: str
    description: str
    arguments_model: type[ArgsT]
    parallel_safe: bool = False
    """True when concurrent calls (in one batch) are safe; the tool handles its own locking."""
    changes_files: bool = True
    """False when no call can change the workspace's files: a batch of such calls records the
    workspace's previous snapshot again without reading the files (docs/snapshots.md)."""

    def risky(self, arguments: ArgsT) -> bool:
        """A hint for the 'risky' confirmation policy: may this call change or leak anything?"""
        return False

    def interrupt(self, context: ToolContext) -> None:
        """``context.interruption`` was just set: stop this conversation's calls in progress
        now (from another thread; they still return, and their result is replaced by an
        "interrupted" error). By default nothing: a short call ends by itself."""
        return None

    def parse_arguments(self, arguments: dict[str, Any]) -> ArgsT:
        """The call's JSON arguments as this tool's model. Raises pydantic's ValidationError
        (or a ValueError saying what is wrong) for arguments the model must fix."""
        return self.arguments_model.model_validate(arguments)

    @abstractmethod
    def run(self, arguments: ArgsT, context: ToolContext) -> ToolResult:
        """Execute one validated call."""

    def parameters_schema(self) -> dict[str, Any]:
        """JSON Schema of the arguments, self-contained (no $ref) for any provider."""
        return parameters_schema(self.arguments_model)

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI chat-completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters_schema(),
            },
        }

    def close(self) -> None:
        """Release what the tool holds (processes, connections). Safe to call twice."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
