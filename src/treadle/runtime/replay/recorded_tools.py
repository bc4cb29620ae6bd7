"""The tools of a recorded replay: each call is validated by the real tool set, then answered
with its recorded result instead of being run (nothing touches a workspace).

``RecordedResultsAgent`` is the runtime's own ``Agent`` (parallel threads, call order, the
boundary that turns a failure into an agent error); only the tool's execution is replaced, by
``RecordedTools.execute``, told which call it answers through a thread-local.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from treadle.events.frozen_json import thaw
from treadle.events.model import ActionEvent, AgentErrorEvent, ObservationEvent, UserRejectionEvent
from treadle.runtime.agent import Agent, CallOutcome
from treadle.runtime.replay.recording import Recording
from treadle.runtime.tools import ToolCallError, ToolContext, ToolSet
from treadle.runtime.tools.base import ToolArguments, ToolResult

UNEXPECTED = "The tool failed unexpectedly: "
"""How the agent words a tool's own failure (``Agent._run_one``): replayed as that failure."""
NO_RECORDED_RESULT = (
    "replay: the recording has no result for call {call!r} of tool {tool!r} (it was not "
    "answered on the recorded path)"
)


class RecordedTools(ToolSet):
    """The conversation's tools for validation, schemas and parallel safety; ``execute``
    returns the call's recorded result."""

    def __init__(self, tools: ToolSet, recording: Recording) -> None:
        super().__init__(tools.values())
        self._recording = recording
        self.answering = threading.local()
        """``.action``: the call this thread answers (set by ``RecordedResultsAgent``)."""

    def execute(self, tool_name: str, arguments: ToolArguments, context: ToolContext) -> ToolResult:
        action: ActionEvent | None = getattr(self.answering, "action", None)
        if action is None:  # only the agent's call boundary may ask: it names the call
            raise RuntimeError("a recorded tool was run outside RecordedResultsAgent._run_one")
        recorded = self._recording.results.get(action.tool_call_id)
        if recorded is None or isinstance(recorded, UserRejectionEvent):
            # A rejected call is never run; answering it here means the replay ran it.
            raise ToolCallError(
                tool_name,
                "tool_error",
                NO_RECORDED_RESULT.format(call=action.tool_call_id, tool=tool_name),
            )
        if isinstance(recorded, AgentErrorEvent):
            raise _recorded_error(tool_name, recorded)
        return _recorded_result(recorded)


def _recorded_result(recorded: ObservationEvent) -> ToolResult:
    data = thaw(dict(recorded.data))
    return ToolResult(
        content=recorded.content,
        is_error=recorded.is_error,
        data=data,
        # Only ``finish`` ends a turn, and it says so in its data (tools/finish.py).
        ends_turn=data.get("finished") is True,
        image_urls=tuple(recorded.image_urls),
    )


def _recorded_error(tool_name: str, recorded: AgentErrorEvent) -> Exception:
    """The exception that makes the agent record ``recorded`` again: a tool's own failure
    (same class name and text), or a call error the model can fix."""
    if recorded.error.startswith(UNEXPECTED):
        name, _, message = recorded.error[len(UNEXPECTED) :].partition(": ")
        if name.isidentifier():
            failure: type[Exception] = type(name, (Exception,), {})
            return failure(message)
    return ToolCallError(tool_name, "tool_error", recorded.error)


@dataclass
class RecordedResultsAgent(Agent):
    """The runtime's agent over ``RecordedTools``: each call's thread names its call before
    the real ``_run_one`` validates it and asks the tools."""

    recorded_tools: RecordedTools | None = field(default=None)

    def _run_one(self, action: ActionEvent, context: ToolContext) -> CallOutcome:
        assert self.recorded_tools is not None
        self.recorded_tools.answering.action = action
        try:
            return super()._run_one(action, context)
        finally:
            self.recorded_tools.answering.action = None


def recorded_results_agent(agent: Agent, recording: Recording) -> RecordedResultsAgent:
    """``agent`` (model, system prompt, tools) answering its calls from ``recording``."""
    tools = RecordedTools(agent.tools, recording)
    return RecordedResultsAgent(
        model=agent.model, tools=tools, system_prompt=agent.system_prompt, recorded_tools=tools
    )
