"""The tools of a recorded replay: each call is validated by the real tool set, then answered
with its recorded result instead of being run (nothing touches a workspace).

The agent is the runtime's own (parallel threads, call order, the boundary that turns a
failure into an agent error); only the tool's execution is replaced, by
``RecordedTools.execute``, which finds the call it answers in its context (``ToolContext.call``).
A call the recording closed as interrupted is stopped the way it was: the user's interrupt is
made again, a crash ends the run there (``ReplayedCrash``) and the next run closes the call.
"""

from __future__ import annotations

from collections.abc import Callable

from treadle.events.frozen_json import thaw
from treadle.events.model import AgentErrorEvent, ObservationEvent, UserRejectionEvent
from treadle.runtime.agent import STOPPED_OUTPUT, Agent
from treadle.runtime.replay.recorded_mcp import recorded_tool_set
from treadle.runtime.replay.recording import Recording
from treadle.runtime.tools import ToolCallError, ToolContext, ToolSet
from treadle.runtime.tools.base import ToolArguments, ToolResult

UNEXPECTED = "The tool failed unexpectedly: "
"""How the agent words a tool's own failure (``Agent._run_one``): replayed as that failure."""
NO_RECORDED_RESULT = (
    "replay: the recording has no result for call {call!r} of tool {tool!r} (it was not "
    "answered on the recorded path)"
)


class ReplayedCrash(BaseException):
    """The recorded run died while this call ran (its result: ``interrupted: "crash"``). A
    BaseException, as a kill is: no boundary of the runtime records it; the run just ends,
    its call open, and the driver's next run closes it as the recorded run's did."""


class RecordedTools(ToolSet):
    """The conversation's tools for validation, schemas and parallel safety; ``execute``
    returns the call's recorded result. ``interrupt``: the conversation's own (the user's
    interrupt, made again where the recording has one)."""

    def __init__(self, tools: ToolSet, recording: Recording, interrupt: Callable[[], None]) -> None:
        super().__init__(tools.values(), tools.unavailable)
        self._recording = recording
        self._interrupt = interrupt

    def execute(self, tool_name: str, arguments: ToolArguments, context: ToolContext) -> ToolResult:
        action = context.call
        if action is None:  # the agent names each call it runs; anything else is a bug
            raise RuntimeError("a recorded tool was asked to run a call it was not told of")
        recorded = self._recording.results.get(action.tool_call_id)
        if recorded is None or isinstance(recorded, UserRejectionEvent):
            # A rejected call is never run; answering it here means the replay ran it.
            raise ToolCallError(
                tool_name,
                "tool_error",
                NO_RECORDED_RESULT.format(call=action.tool_call_id, tool=tool_name),
            )
        if isinstance(recorded, AgentErrorEvent):
            if recorded.interrupted == "crash":
                raise ReplayedCrash(action.tool_call_id)
            if recorded.interrupted == "user":
                # The runtime words the error itself, with what the call returned once stopped.
                self._interrupt()
                _, _, returned = recorded.error.partition(STOPPED_OUTPUT)
                return ToolResult(content=returned)
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


def recorded_results_agent(
    agent: Agent, recording: Recording, interrupt: Callable[[], None]
) -> Agent:
    """``agent`` (model, system prompt) with its tools answering from ``recording``; its MCP
    tools are stand-ins made from the recorded schemas (no server started). ``interrupt``
    interrupts the replayed run (``Conversation.interrupt``)."""
    return Agent(
        model=agent.model,
        tools=RecordedTools(recorded_tool_set(agent.tools, recording), recording, interrupt),
        system_prompt=agent.system_prompt,
    )
