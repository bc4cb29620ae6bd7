"""Recorded replays of runs that stopped on their own way: a call interrupted by the user, a
call a crash left open (closed by the next run), a budget pause the user raised and went on
from, a model call that failed once. Each replays to the same events (REPLAY-RECORDED)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from support.replays import FINISH, bash, call, calls
from support.waiting import wait_until
from treadle.events.model import AgentErrorEvent, PauseEvent, StateChangeEvent
from treadle.runtime.agent import NOT_STARTED_BY_USER
from treadle.runtime.budget import Budget
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.conversation import MODEL_ERROR_KEY, Conversation
from treadle.runtime.llm.base import ModelError, ModelRequest, ModelResponse
from treadle.runtime.llm.scripted import ScriptedModel
from treadle.runtime.replay import replay_recorded
from treadle.runtime.replay.rerun_mode import rerun
from treadle.runtime.settings import ConversationSettings, build_model
from treadle.runtime.status import ConversationStatus as Status

NO_SANDBOX = {"sandbox": {"kind": "none"}}


def path_of(store, conversation_id):
    return store.path_to_root(conversation_id, store.head(conversation_id))


def closed_as(store, conversation_id, by: str) -> list[AgentErrorEvent]:
    return [
        event
        for event in path_of(store, conversation_id)
        if isinstance(event, AgentErrorEvent) and event.interrupted == by
    ]


def test_a_call_the_user_interrupted_replays_the_same(store, workspace):
    settings = ConversationSettings.scripted_inline(
        [bash("echo before"), bash("touch started; sleep 30"), bash("echo after"), FINISH],
        workspace,
        **NO_SANDBOX,
    )
    with Conversation.create(store, settings) as conversation:
        conversation.send_message("go")
        outcome: list[Status] = []
        runner = threading.Thread(target=lambda: outcome.append(conversation.run()), daemon=True)
        runner.start()
        try:
            wait_until(lambda: (workspace / "started").exists())
            conversation.interrupt()
        finally:
            runner.join(timeout=30)
        assert outcome == [Status.PAUSED]
        conversation.send_message("go on")
        assert conversation.run() is Status.FINISHED
        conversation_id = conversation.id
    assert len(closed_as(store, conversation_id, "user")) == 1
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events


class StoppedWhileAnswering:
    """The scripted model, with the user stopping the run (``conversation.interrupt`` or
    ``pause``) while it answers response ``at``: the calls of that answer never start."""

    def __init__(self, responses: list[dict[str, Any]], at: int, how: str) -> None:
        self.inner = ScriptedModel.from_responses(responses)
        self.at, self.how = at, how
        self.conversation: Conversation | None = None

    @property
    def name(self) -> str:
        return self.inner.name

    def complete(self, request: ModelRequest) -> ModelResponse:
        if request.responses_before == self.at and self.conversation is not None:
            getattr(self.conversation, self.how)()
        return self.inner.complete(request)


@pytest.mark.parametrize("how", ["interrupt", "pause"])
def test_calls_a_stop_kept_from_starting_replay_the_same(store, workspace, how):
    """The stop came while the model answered: the recorded calls never started, and the
    replay (whose model answers at once) keeps them from starting too (it once ran them and
    stopped them as interrupted: another error)."""
    responses = [bash("echo one"), bash("echo two"), FINISH]
    settings = ConversationSettings.scripted_inline(responses, workspace, **NO_SANDBOX)
    model = StoppedWhileAnswering(responses, at=1, how=how)
    with Conversation.create(store, settings, model=model) as conversation:
        model.conversation = conversation
        conversation.send_message("go")
        assert conversation.run() is Status.PAUSED
        model.conversation = None
        conversation.send_message("go on")
        assert conversation.run() is Status.FINISHED
        conversation_id = conversation.id
    (never_started,) = closed_as(store, conversation_id, "user")
    assert never_started.error.startswith(NOT_STARTED_BY_USER)
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events


@pytest.mark.parametrize("then", [None, "go on"])
def test_a_head_moved_onto_a_call_a_stop_kept_from_starting_replays_the_same(
    store, workspace, then
):
    """Found by the random state machine: the head moved back onto the answer of a call the
    user's interrupt kept from starting (then, maybe, a message). The replay makes the
    interrupt again, and with it the pause that ended that step: it moves its head back onto
    the answer as the user did (once it reported that pause as an event the recording
    lacks)."""
    responses = [bash("echo one"), FINISH]
    settings = ConversationSettings.scripted_inline(responses, workspace, **NO_SANDBOX)
    model = StoppedWhileAnswering(responses, at=0, how="interrupt")
    with Conversation.create(store, settings, model=model) as conversation:
        model.conversation = conversation
        conversation.send_message("go")
        assert conversation.run() is Status.PAUSED
        model.conversation = None
        (never_started,) = closed_as(store, conversation.id, "user")
        conversation.switch_branch(never_started.id)
        if then is not None:
            conversation.send_message(then)
        conversation_id = conversation.id
    kinds = [event.kind for event in path_of(store, conversation_id)]
    assert kinds[-2:] == (["agent_error", "message"] if then else ["action", "agent_error"])
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events


@pytest.mark.parametrize("how", ["interrupt", "pause"])
def test_calls_confirmed_after_the_stop_that_kept_them_waiting_replay_the_same(
    store, workspace, how
):
    """Found by the random state machine: with confirmation always, the user stopped the run
    while the model answered (its calls wait for confirmation, the run pauses), then confirmed
    them. The replay once confirmed them as soon as its step ended, before the recorded pause:
    their results landed before it (two observations the recording did not have there)."""
    responses = [
        calls(call("terminal", {"command": "echo one"}), call("terminal", {"command": "echo two"})),
        FINISH,
    ]
    settings = ConversationSettings.scripted_inline(
        responses, workspace, confirmation=ConfirmationPolicy.ALWAYS, **NO_SANDBOX
    )
    model = StoppedWhileAnswering(responses, at=0, how=how)
    with Conversation.create(store, settings, model=model) as conversation:
        model.conversation = conversation
        conversation.send_message("go")
        conversation.run()
        model.conversation = None
        conversation.confirm()  # the calls the stop kept waiting
        assert conversation.run() is Status.WAITING_FOR_CONFIRMATION  # the finish
        conversation.confirm()
        assert conversation.status is Status.FINISHED
        conversation_id = conversation.id
    kinds = [event.kind for event in path_of(store, conversation_id)]
    print(kinds)
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events


CRASHING_CHILD = textwrap.dedent(
    """
    import json, sys
    from treadle.runtime.conversation import MODEL_ERROR_KEY, Conversation
    from treadle.runtime.settings import ConversationSettings, build_model
    from treadle.store.urls import open_store

    store_url, responses, workspace = sys.argv[1:4]
    settings = ConversationSettings.scripted_inline(
        json.loads(responses), workspace, sandbox={"kind": "none"}
    )
    conversation = Conversation.create(open_store(store_url), settings, id="crash-me")
    conversation.send_message("run the long command")
    conversation.run()
    """
)


def test_a_call_a_crash_left_open_replays_the_same(store, store_file, workspace):
    responses = [bash("echo before"), bash("touch started && sleep 60"), FINISH]
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CRASHING_CHILD,
            f"sqlite:///{store_file}",
            json.dumps(responses),
            str(workspace),
        ],
        start_new_session=True,
    )
    try:
        wait_until(lambda: (workspace / "started").exists(), timeout_s=30)
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=10)
    with Conversation.open(store, "crash-me") as reopened:
        assert reopened.run() is Status.FINISHED  # closes the call the crash left open
    assert len(closed_as(store, "crash-me", "crash")) == 1
    report = replay_recorded(store, "crash-me")
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events


def test_a_budget_raised_after_its_pause_replays_the_same(store, workspace):
    settings = ConversationSettings.scripted_inline(
        [bash("echo one"), bash("echo two"), FINISH],
        workspace,
        max_total_tokens=1,  # reached by the first model call
        **NO_SANDBOX,
    )
    with Conversation.create(store, settings) as conversation:
        conversation.send_message("go")
        assert conversation.run() is Status.PAUSED
        conversation.raise_budget(Budget(max_total_tokens=1_000_000))
        assert conversation.run() is Status.FINISHED
        conversation_id = conversation.id
    pauses = [e for e in path_of(store, conversation_id) if isinstance(e, PauseEvent)]
    assert [pause.source for pause in pauses] == ["environment"]
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events


class FailsOnce:
    """The scripted model, but its ``fail_at``-th call fails (a provider's bad answer)."""

    def __init__(self, scripted: ScriptedModel, fail_at: int) -> None:
        self._scripted = scripted
        self._calls = 0
        self._fail_at = fail_at

    @property
    def name(self) -> str:
        return self._scripted.name

    def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            return self._scripted.complete(request)
        self._calls += 1
        if self._calls == self._fail_at:
            raise ModelError("the provider answered 502", raw='{"error": "bad gateway"}')
        return self._scripted.complete(request)


def facts_of(store, conversation_id, key):
    return [
        item.event.value
        for item in store.get_range(conversation_id, 0, 10**6)
        if isinstance(item.event, StateChangeEvent) and item.event.key == key
    ]


def test_a_model_call_that_failed_once_replays_the_same(store, workspace, tmp_path):
    settings = ConversationSettings.scripted_inline(
        [bash("echo one"), FINISH], workspace, **NO_SANDBOX
    )
    model = FailsOnce(build_model(settings.model), fail_at=2)
    with Conversation.create(store, settings, model=model) as conversation:
        conversation.send_message("go")
        assert conversation.run() is Status.ERROR
        assert conversation.run() is Status.FINISHED
        conversation_id = conversation.id
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events
    # Rerun: the new conversation's log has the failure where the recording has it.
    report = rerun(store, conversation_id, workspace=workspace, into=tmp_path / "rerun")
    assert report.divergences == []
    recorded_failures = facts_of(store, conversation_id, MODEL_ERROR_KEY)
    assert recorded_failures == [
        {"error": "the provider answered 502", "raw_response": '{"error": "bad gateway"}'}
    ]
    assert facts_of(store, report.new_conversation, MODEL_ERROR_KEY) == recorded_failures
    assert [e.kind for e in path_of(store, report.new_conversation)] == [
        e.kind for e in path_of(store, conversation_id)
    ]
