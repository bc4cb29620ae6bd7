"""Interrupt in the runtime: recorded by another object (another process) it reaches the run
through the log and stops the command in progress; a model call in flight and a parallel call
that ignores the interrupt are abandoned; the calls are closed with errors marked
``interrupted: "user"``, the status is PAUSED, and a pause still lets the call in progress end."""

from __future__ import annotations

import threading
import time

from support.waiting import DEADLINE_S, wait_until
from treadle.events.model import ActionEvent, AgentErrorEvent, ObservationEvent, PauseEvent
from treadle.runtime.agent import Agent
from treadle.runtime.conversation import Conversation
from treadle.runtime.interrupts import ABANDON_GRACE_S
from treadle.runtime.llm.base import ModelRequest, ModelResponse, ToolCall
from treadle.runtime.log import ConversationLog
from treadle.runtime.parts import ConversationParts
from treadle.runtime.requests import USER_INTERRUPT, PauseRequest
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.tools import Tool, ToolArguments, ToolContext, ToolResult, ToolSet
from treadle.runtime.tools.finish import FinishTool
from treadle.runtime.workspace.local import LocalWorkspace

from .test_conversation import FINISH, call, scripted
from .test_run_requests import run_in_background

STOPPED_WITHIN_S = 8.0
"""Seconds an interrupt may take to stop a call: far below what the calls here would take
unstopped (30 s and more), and room for a loaded machine (a bound of 1.5 s was timing luck)."""


def _interrupted(conversation: Conversation) -> list[AgentErrorEvent]:
    return [
        event
        for event in conversation.active_path()
        if isinstance(event, AgentErrorEvent) and event.interrupted == "user"
    ]


def test_an_interrupt_recorded_by_another_process_stops_the_command_now(store, workspace):
    command = "touch started; sleep 30; touch ran-on"
    runner = scripted(
        store, workspace, [{"tool_calls": [call("terminal", {"command": command})]}, FINISH]
    )
    runner.send_message("sleep")
    thread, outcome = run_in_background(runner)
    other = Conversation.open(store, runner.id)  # what another server process would hold
    try:
        wait_until(lambda: (workspace / "started").exists())
        sent = time.monotonic()
        other.interrupt()  # nothing runs in ``other``: recorded in the log
        thread.join(timeout=10)
        assert time.monotonic() - sent < STOPPED_WITHIN_S
        assert outcome == [Status.PAUSED]
        assert other.stored_status() == (Status.PAUSED, USER_INTERRUPT)
        (closed,) = _interrupted(other)
        assert "interrupted by the user" in closed.error
        assert isinstance(other.active_path()[-1], PauseEvent)
        assert not (workspace / "ran-on").exists()
        assert runner.run() is Status.FINISHED  # the request was honoured once, not again
    finally:
        other.close()
        runner.close()


def test_a_pause_lets_the_command_in_progress_end(store, workspace):
    command = "touch started; sleep 0.5; touch ended"
    runner = scripted(
        store, workspace, [{"tool_calls": [call("terminal", {"command": command})]}, FINISH]
    )
    runner.send_message("sleep")
    thread, outcome = run_in_background(runner)
    try:
        wait_until(lambda: (workspace / "started").exists())
        runner.pause()
        thread.join(timeout=10)
        assert outcome == [Status.PAUSED]
        assert (workspace / "ended").exists()
        assert _interrupted(runner) == []
    finally:
        runner.close()


class _SlowModel:
    """Its first answer waits until released (a model call in flight); then it finishes."""

    name = "slow-model"

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            self.asked.set()
            self.release.wait(DEADLINE_S)
            return ModelResponse(
                id="late", tool_calls=(ToolCall("late-call", "think", '{"thought": "late"}'),)
            )
        return ModelResponse(
            id="finish", tool_calls=(ToolCall("finish-call", "finish", '{"message": "done"}'),)
        )


def test_a_model_call_in_flight_is_abandoned(store, workspace):
    model = _SlowModel()
    settings = ConversationSettings.litellm(model.name, workspace, tools=("think", "finish"))
    conversation = Conversation.create(store, settings, model=model)
    conversation.send_message("think")
    thread, outcome = run_in_background(conversation)
    try:
        assert model.asked.wait(DEADLINE_S)
        sent = time.monotonic()
        conversation.interrupt()
        thread.join(timeout=10)
        assert time.monotonic() - sent < STOPPED_WITHIN_S
        assert outcome == [Status.PAUSED]
        model.release.set()  # the abandoned call ends; its answer is dropped
        assert not any(isinstance(e, ActionEvent) for e in conversation.active_path())
        assert conversation.run() is Status.FINISHED
        actions = [e for e in conversation.active_path() if isinstance(e, ActionEvent)]
        assert [a.tool_call_id for a in actions] == ["finish-call"]
    finally:
        model.release.set()
        conversation.close()


class _StubbornArguments(ToolArguments):
    name: str


class _StubbornTool(Tool[_StubbornArguments]):
    """A parallel-safe tool whose calls ignore the interrupt until released."""

    name = "stubborn"
    description = "Waits."
    arguments_model = _StubbornArguments
    parallel_safe = True

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def run(self, arguments: _StubbornArguments, context: ToolContext) -> ToolResult:
        self.started.release()
        if arguments.name == "quick":
            return ToolResult(content="quick done")
        self.release.wait(DEADLINE_S)
        return ToolResult(content="too late")


class _TwoCallsModel:
    name = "two-calls"

    def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(
            id="both",
            tool_calls=(
                ToolCall("c-quick", "stubborn", '{"name": "quick"}'),
                ToolCall("c-slow", "stubborn", '{"name": "slow"}'),
            ),
        )


def test_a_parallel_call_that_ignores_the_interrupt_is_abandoned(store, workspace):
    stubborn = _StubbornTool()
    info = store.create_conversation(title="parallel")
    agent = Agent(_TwoCallsModel(), ToolSet([stubborn, FinishTool()]))
    parts = ConversationParts(agent, LocalWorkspace(workspace))
    conversation = Conversation(ConversationLog(store, info.id), parts)
    conversation.send_message("both")
    thread, outcome = run_in_background(conversation)
    try:
        for _ in range(2):
            assert stubborn.started.acquire(timeout=30)

        def quick_stored() -> bool:  # it had returned: not only started (a busy machine)
            stored = [item.event for item in store.get_range(info.id, 0, 10**9)]
            # Its result, not its action (which has the call id too: read once that was
            # stored, the interrupt came before the result under load and closed the call).
            return any(
                isinstance(e, ObservationEvent) and e.tool_call_id == "c-quick" for e in stored
            )

        wait_until(quick_stored, what="the quick call's result stored")
        sent = time.monotonic()
        conversation.interrupt()
        thread.join(timeout=30)
        # abandoned after its grace, not waited for (it would hold 30 s); slack for a busy machine
        assert time.monotonic() - sent < ABANDON_GRACE_S + 10
        assert outcome == [Status.PAUSED]
        # The quick call had returned before the interrupt: its result stands.
        (quick,) = [e for e in conversation.active_path() if isinstance(e, ObservationEvent)]
        assert (quick.tool_call_id, quick.content) == ("c-quick", "quick done")
        (slow,) = _interrupted(conversation)
        assert slow.tool_call_id == "c-slow"
        assert "abandoned" in slow.error
        assert conversation.pending_actions() == []
    finally:
        stubborn.release.set()
        conversation.close()


def test_an_interrupt_noticed_as_a_run_ended_is_not_meant_for_the_next_run(store, workspace):
    runner = scripted(store, workspace, [FINISH])
    try:
        requests = PauseRequest(store, runner.id, -1)
        requests.set(USER_INTERRUPT, "interrupt")  # the watcher's, as the last run ended
        assert requests.interrupt_requested()
        requests.forget_interrupt()  # the next run starts
        assert not requests.is_set()
        assert not requests.interrupt_requested()
        requests.set()  # a pause asked here is kept for the run it reaches
        requests.forget_interrupt()
        assert requests.is_set()
    finally:
        runner.close()
