"""The conversation state machine (runtime/states.py, docs/contracts.md): pause and interrupt
while calls wait for confirmation keep them pending and confirmable (issue 28, defect 1), an
interrupt during a partial confirm closes only the calls it stopped, a pause asked during a
confirm-mode model call is honoured, an interrupt during a condensation's summary call is
honoured (defect 3), a provider that repeats a response id still replays the same (defect 6),
closing a fork that shares its parent's tools leaves the parent's shell alone, and a
before-restore snapshot never covers an event (issue 23)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from support.replays import recorded
from support.waiting import DEADLINE_S, wait_until
from treadle.events.model import AgentErrorEvent, ObservationEvent
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.conversation import Conversation
from treadle.runtime.llm.base import ModelRequest, ModelResponse, ToolCall
from treadle.runtime.replay import replay_recorded
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.snapshots import covering_snapshot, snapshot_facts
from treadle.runtime.states import markdown_table
from treadle.runtime.status import ConversationStatus as Status

from .test_conversation import FINISH, call, scripted
from .test_run_requests import run_in_background

ALWAYS = ConfirmationPolicy.ALWAYS
TWO_CALLS = {
    "tool_calls": [
        call("terminal", {"command": "echo one > one.txt"}, "c1"),
        call("terminal", {"command": "echo two > two.txt"}, "c2"),
    ]
}


def _crashes(conversation: Conversation) -> list[AgentErrorEvent]:
    return [
        e
        for e in conversation.active_path()
        if isinstance(e, AgentErrorEvent) and e.interrupted == "crash"
    ]


def test_the_documented_table_is_the_one_the_code_follows():
    text = (Path(__file__).parents[2] / "docs" / "contracts.md").read_text()
    assert markdown_table() in text


def test_a_pause_while_waiting_keeps_the_calls_confirmable(store, workspace):
    with scripted(store, workspace, [TWO_CALLS, FINISH], confirmation=ALWAYS) as conv:
        conv.send_message("write")
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION
        conv.pause()
        assert conv.stored_status()[0] is Status.PAUSED
        assert len(conv.check_pending()) == 2  # confirmable (was 409 not_waiting)
        # A run asks nothing: the calls need an answer first (they were closed as crashes).
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION
        assert _crashes(conv) == []
        assert len(conv.pending_actions()) == 2
        conv.interrupt()  # nothing runs: recorded only; still waiting
        assert conv.confirm() is Status.IDLE
        assert (workspace / "one.txt").exists()
        assert (workspace / "two.txt").exists()
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION  # finish waits too
        assert conv.confirm() is Status.FINISHED
        assert _crashes(conv) == []


def test_an_interrupt_during_a_partial_confirm_leaves_the_other_call_pending(store, workspace):
    slow = {
        "tool_calls": [
            call("terminal", {"command": "touch started; sleep 30"}, "slow"),
            call("terminal", {"command": "echo two > two.txt"}, "other"),
        ]
    }
    with scripted(store, workspace, [slow, FINISH], confirmation=ALWAYS) as conv:
        conv.send_message("go")
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION
        first, second = conv.pending_actions()
        outcome: list[Status] = []
        thread = threading.Thread(target=lambda: outcome.append(conv.confirm([first.id])))
        thread.start()
        wait_until(lambda: (workspace / "started").exists())
        conv.interrupt()
        thread.join(timeout=30)
        assert outcome == [Status.PAUSED]
        stopped = [e for e in conv.active_path() if isinstance(e, AgentErrorEvent)]
        assert [(e.tool_call_id, e.interrupted) for e in stopped] == [("slow", "user")]
        assert [a.id for a in conv.pending_actions()] == [second.id]  # never a "crash"
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION
        assert conv.reject(reason="not now") is Status.IDLE
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION  # finish waits too
        assert conv.confirm() is Status.FINISHED
        assert _crashes(conv) == []


class _GatedModel:
    """Its first answer (two calls) waits until released; then it finishes."""

    name = "gated-model"

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            self.asked.set()
            self.release.wait(DEADLINE_S)
            return ModelResponse(id="r1", tool_calls=(ToolCall("t1", "think", '{"thought": "a"}'),))
        return ModelResponse(id="r2", tool_calls=(ToolCall("f", "finish", '{"message": "ok"}'),))


def test_a_pause_during_a_confirm_mode_model_call_pauses_keeping_the_calls(store, workspace):
    model = _GatedModel()
    settings = ConversationSettings.litellm(
        model.name, workspace, tools=("think", "finish"), confirmation=ALWAYS
    )
    with Conversation.create(store, settings, model=model) as conv:
        conv.send_message("think")
        thread, outcome = run_in_background(conv)
        assert model.asked.wait(DEADLINE_S)
        conv.pause()
        model.release.set()
        thread.join(timeout=30)
        assert outcome == [Status.PAUSED]  # was waiting_for_confirmation
        assert len(conv.check_pending()) == 1  # the answer kept, its call confirmable
        assert conv.confirm() is Status.IDLE
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION  # finish waits too
        assert conv.confirm() is Status.FINISHED


class _SlowSummaries:
    """Steps that think at length; a summary call (no tools) waits until released."""

    name = "slow-summaries"

    def __init__(self) -> None:
        self.summary_asked = threading.Event()
        self.release = threading.Event()
        self.steps = 0
        self.after_summary = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        tools = request.tools
        if not tools:
            self.summary_asked.set()
            self.release.wait(DEADLINE_S)
            return ModelResponse(id="summary", text="a summary")
        if self.summary_asked.is_set():
            self.after_summary += 1
        self.steps += 1
        thought = f'{{"thought": "step {self.steps} {"x" * 600}"}}'
        return ModelResponse(
            id=f"r{self.steps}", tool_calls=(ToolCall(f"t{self.steps}", "think", thought),)
        )


def test_an_interrupt_during_the_summary_call_is_honoured(store, workspace):
    model = _SlowSummaries()
    settings = ConversationSettings.litellm(
        model.name, workspace, tools=("think", "finish"), context_tokens=1_000
    )
    with Conversation.create(store, settings, model=model) as conv:
        conv.send_message("think a lot")
        thread, outcome = run_in_background(conv)
        assert model.summary_asked.wait(DEADLINE_S)
        conv.interrupt()
        thread.join(timeout=10)
        model.release.set()
        assert outcome == [Status.PAUSED]
        assert model.after_summary == 0  # the model was not asked again
        kinds = [e.kind for e in conv.active_path()]
        assert "condensation" not in kinds  # the summary's answer (and cost) dropped


def test_a_provider_repeating_a_response_id_replays_the_same(store, workspace):
    thinks = [{"id": "same", "tool_calls": [call("think", {"thought": f"t{n}"})]} for n in range(3)]
    conversation = recorded(store, workspace, [*thinks, {"id": "same", **FINISH}])
    report = replay_recorded(store, conversation)
    assert report.divergences == []


def test_closing_a_fork_that_shares_the_tools_leaves_the_parents_shell(store, workspace):
    steps = [
        {"tool_calls": [call("terminal", {"command": "export X=kept"})]},
        FINISH,
        {"tool_calls": [call("terminal", {"command": "echo X=$X"})]},
        FINISH,
    ]
    with scripted(store, workspace, steps, sandbox={"kind": "none"}) as parent:
        parent.send_message("set")
        assert parent.run() is Status.FINISHED
        with parent.fork():
            pass
        parent.send_message("read")
        assert parent.run() is Status.FINISHED
        results = [e for e in parent.active_path() if isinstance(e, ObservationEvent)]
        assert any("X=kept" in r.content for r in results if r.tool_name == "terminal")


def test_a_snapshot_taken_before_a_restore_never_covers_its_event(store, workspace):
    steps = [
        {"tool_calls": [call("terminal", {"command": "echo one > f.txt"})]},
        {"tool_calls": [call("terminal", {"command": "echo two > f.txt"})]},
        FINISH,
    ]
    with scripted(store, workspace, steps) as conv:
        conv.send_message("write")
        assert conv.run() is Status.FINISHED
        head = conv.head
        observations = [e for e in conv.active_path() if isinstance(e, ObservationEvent)]
        first_write, second_write = observations[0], observations[1]
        at_first = covering_snapshot(store, conv.id, first_write.id)
        conv.restore_snapshot(at_first.id)  # the undo: files "one", the head stays
        assert (workspace / "f.txt").read_text() == "one\n"
        # The next restore's "before" snapshot (files "one") is filed after the head...
        conv.switch_branch(first_write.id, restore_files=True)
        befores = [f for f in snapshot_facts(store, conv.id) if f.value.get("reason")]
        assert len(befores) == 2
        # ...yet the head's files are still those its own batch left.
        conv.switch_branch(head, restore_files=True)
        assert (workspace / "f.txt").read_text() == "two\n"
        forked = conv.fork(
            second_write.id, restore_files=True, workspace=str(workspace.parent / "f")
        )
        with forked:
            assert (workspace.parent / "f" / "f.txt").read_text() == "two\n"
        assert re.fullmatch(r"[0-9a-f]+", at_first.id)
