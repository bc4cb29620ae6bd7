"""The tools of a recorded replay: each call is validated by the real tool set, then answered
with its recorded result instead of being run (nothing touches a workspace).

The agent is the runtime's own (parallel threads, call order, the boundary that turns a
failure into an agent error); only the tool's execution is replaced, by
``RecordedTools.execute``, which finds the call it answers in its context (``ToolContext.call``).
A call the recording closed as interrupted is stopped the way it was: the user's interrupt is
made again, a crash ends the run there (``ReplayedCrash``) and the next run closes the call; a
call the user's pause kept from starting is kept from starting again (``RecordedAgent``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from treadle.events.frozen_json import thaw
from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    ObservationEvent,
    UserRejectionEvent,
)
from treadle.runtime.agent import NOT_STARTED_BY_USER, STOPPED_OUTPUT, Agent, CallOutcome
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


class RecordedAgent(Agent):
    """The runtime's agent whose calls are answered from the recording; a call the recorded
    run never started because the user paused (or interrupted) before it is not started now
    either: the pause is asked for again just before it (``pause``), where the recorded one
    came, whatever the timing of the recorded run was (the pause may have come while the model
    answered)."""

    def __init__(
        self, agent: Agent, recording: Recording, tools: RecordedTools, pause: Callable[[], None]
    ) -> None:
        super().__init__(model=agent.model, tools=tools, system_prompt=agent.system_prompt)
        self._recording = recording
        self._pause = pause

    def run_calls(
        self,
        actions: Sequence[ActionEvent],
        context: ToolContext,
        *,
        should_start: Callable[[], bool] = lambda: True,
    ) -> Iterator[CallOutcome]:
        upcoming = iter(actions)

        def start_as_recorded() -> bool:  # asked before each call, in call order
            action = next(upcoming, None)
            if action is not None and self._never_started(action):
                self._pause()
            return should_start()

        return super().run_calls(actions, context, should_start=start_as_recorded)

    def _never_started(self, action: ActionEvent) -> bool:
        recorded = self._recording.results.get(action.tool_call_id)
        return (
            isinstance(recorded, AgentErrorEvent)
            and recorded.interrupted == "user"
            and recorded.error.startswith(NOT_STARTED_BY_USER)
        )


def recorded_results_agent(
    agent: Agent,
    recording: Recording,
    interrupt: Callable[[], None],
    pause: Callable[[], None],
) -> Agent:
    """``agent`` (model, system prompt) with its tools answering from ``recording``; its MCP
    tools are stand-ins made from the recorded schemas (no server started). ``interrupt`` and
    ``pause`` interrupt and pause the replayed run (``Conversation.interrupt``, ``pause``)."""
    tools = RecordedTools(recorded_tool_set(agent.tools, recording), recording, interrupt)
    return RecordedAgent(agent, recording, tools, pause)
