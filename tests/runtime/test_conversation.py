"""The conversation state machine with a scripted model, real tools and a real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.fake_openai import FakeOpenAIServer
from treadle.events.projection import count_tool_calls
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.conversation import Conversation, ConversationError
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status


def scripted(store, workspace: Path, responses, **fields) -> Conversation:
    script = workspace.parent / f"script-{len(list(workspace.parent.glob('script-*')))}.json"
    script.write_text(json.dumps({"responses": responses}))
    return Conversation.create(store, ConversationSettings.scripted(script, workspace, **fields))


def call(name, arguments, call_id=None):
    entry = {"name": name, "arguments": arguments}
    if call_id:
        entry["id"] = call_id
    return entry


FINISH = {"tool_calls": [call("finish", {"message": "done"})]}


def kinds(conversation):
    return [event.kind for event in conversation.active_path()]


def test_parallel_calls_are_one_batch_answered_in_call_order(store, workspace):
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "b.txt").write_text("beta\n")
    views = [
        call("file_editor", {"command": "view", "path": "a.txt"}, "ca"),
        call("file_editor", {"command": "view", "path": "b.txt"}, "cb"),
    ]
    with scripted(
        store, workspace, [{"text": "Reading both.", "tool_calls": views}, FINISH]
    ) as conv:
        conv.send_message("read the files")
        assert conv.run() is Status.FINISHED
        path = conv.active_path()
    actions = [e for e in path if e.kind == "action"]
    assert actions[0].llm_response_id == actions[1].llm_response_id
    assert (actions[0].thought, actions[1].thought) == ("Reading both.", "")
    results = [e for e in path if e.kind == "observation"]
    assert [r.tool_call_id for r in results] == ["ca", "cb", "call-1-0"]
    assert "alpha" in results[0].content
    assert "beta" in results[1].content
    assert kinds(conv)[:6] == [
        "system_prompt",
        "message",
        "action",
        "action",
        "observation",
        "observation",
    ]
    messages = conv.messages()
    assert count_tool_calls(messages) == 3
    assert [m["role"] for m in messages[2:5]] == ["assistant", "tool", "tool"]


def test_invalid_calls_become_agent_errors_the_model_sees(store, workspace):
    bad = [
        call("no_such_tool", {"x": 1}, "c-unknown"),
        call("terminal", '{"command": "ls"', "c-malformed"),
        call("file_editor", {"path": "x.txt"}, "c-missing"),
    ]
    with scripted(store, workspace, [{"tool_calls": bad}, FINISH]) as conv:
        conv.send_message("go")
        assert conv.run() is Status.FINISHED
        errors = {e.tool_call_id: e.error for e in conv.active_path() if e.kind == "agent_error"}
        assert set(errors) == {"c-unknown", "c-malformed", "c-missing"}
        assert "Available tools" in errors["c-unknown"]
        assert "not a JSON object" in errors["c-malformed"]
        assert "command: required parameter is missing" in errors["c-missing"]
        malformed = next(
            e for e in conv.active_path() if e.kind == "action" and e.tool_call_id == "c-malformed"
        )
        assert malformed.arguments is None
        assert malformed.raw_arguments == '{"command": "ls"'
        tool_messages = [m for m in conv.messages() if m["role"] == "tool"]
        assert {m["tool_call_id"] for m in tool_messages} >= set(errors)


def test_a_text_answer_finishes_and_a_tool_result_never_does(store, workspace):
    responses = [{"tool_calls": [call("think", {"thought": "plan"})]}, {"text": "Which file?"}]
    with scripted(store, workspace, responses) as conv:
        conv.send_message("fix it")
        assert conv.run() is Status.FINISHED
        assert conv.status_reason == "the agent answered and awaits the user"
        path = conv.active_path()
        assert path[-1].kind == "message"
        assert path[-1].source == "agent"
        assert any(e.kind == "observation" for e in path)  # the think result did not finish


def test_confirm_one_reject_another_then_continue(store, workspace):
    calls = [
        call("terminal", {"command": "echo one > one.txt"}, "c1"),
        call("terminal", {"command": "echo two > two.txt"}, "c2"),
    ]
    with scripted(
        store, workspace, [{"tool_calls": calls}, FINISH], confirmation=ConfirmationPolicy.ALWAYS
    ) as conv:
        conv.send_message("write two files")
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION
        pending = conv.pending_actions()
        assert [a.tool_call_id for a in pending] == ["c1", "c2"]
        assert not (workspace / "one.txt").exists()  # nothing ran before confirmation
        assert conv.messages()[-1]["role"] == "user"  # PROJECT-UNANSWERED: not sent yet
        assert (
            conv.reject([pending[1].id], reason="not that one") is Status.WAITING_FOR_CONFIRMATION
        )
        assert conv.confirm() is Status.IDLE
        assert (workspace / "one.txt").exists()
        assert not (workspace / "two.txt").exists()
        rejection = next(e for e in conv.active_path() if e.kind == "user_rejection")
        assert (rejection.action_id, rejection.tool_call_id, rejection.reason) == (
            pending[1].id,
            "c2",
            "not that one",
        )
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION  # finish needs confirmation too
        assert conv.confirm() is Status.FINISHED


def test_pending_confirmation_survives_a_restart(store, workspace):
    calls = [call("terminal", {"command": "echo hi > hi.txt"}, "c1")]
    with scripted(
        store, workspace, [{"tool_calls": calls}, FINISH], confirmation=ConfirmationPolicy.ALWAYS
    ) as first:
        first.send_message("say hi")
        assert first.run() is Status.WAITING_FOR_CONFIRMATION
        conversation_id = first.id
    with Conversation.open(store, conversation_id) as reopened:
        assert reopened.status is Status.WAITING_FOR_CONFIRMATION
        assert [a.tool_call_id for a in reopened.pending_actions()] == ["c1"]
        assert reopened.run() is Status.WAITING_FOR_CONFIRMATION  # still waiting, not closed
        assert not any(e.kind == "agent_error" for e in reopened.active_path())
        reopened.confirm()
        results = [e for e in reopened.active_path() if e.kind in ("observation", "agent_error")]
        assert (workspace / "hi.txt").exists(), f"the confirmed call's result: {results}"
        assert (workspace / "hi.txt").read_text() == "hi\n"


def test_risky_policy_asks_only_for_risky_calls(store, workspace):
    (workspace / "a.txt").write_text("x\n")
    responses = [
        {"tool_calls": [call("file_editor", {"command": "view", "path": "a.txt"})]},
        {"tool_calls": [call("terminal", {"command": "rm a.txt"})]},
    ]
    with scripted(store, workspace, responses, confirmation=ConfirmationPolicy.RISKY) as conv:
        conv.send_message("look, then delete")
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION
        assert [a.tool_name for a in conv.pending_actions()] == ["terminal"]
        assert (workspace / "a.txt").exists()
        conv.reject()


def test_pause_when_idle_and_during_a_run(store, workspace):
    responses = [{"tool_calls": [call("think", {"thought": f"step {i}"})]} for i in range(5)]
    with scripted(store, workspace, [*responses, FINISH]) as conv:
        conv.pause()
        assert conv.status is Status.PAUSED
        conv.callbacks.append(lambda stored: stored.event.kind == "observation" and conv.pause())
        conv.send_message("think a lot")
        assert conv.run() is Status.PAUSED
        assert sum(1 for k in kinds(conv) if k == "observation") == 1
        assert kinds(conv)[-1] == "pause"
        conv.callbacks.clear()
        assert conv.run() is Status.FINISHED


def test_the_same_calls_and_results_three_times_is_stuck(store, workspace):
    same = {"tool_calls": [call("terminal", {"command": "echo same"})]}
    with scripted(store, workspace, [same] * 5 + [FINISH]) as conv:
        conv.send_message("loop")
        assert conv.run() is Status.STUCK
        assert sum(1 for k in kinds(conv) if k == "action") == 3


def test_model_failure_is_error_with_its_cause(store, workspace):
    with scripted(store, workspace, [{"tool_calls": [call("think", {"thought": "x"})]}]) as conv:
        conv.send_message("go")
        assert conv.run() is Status.ERROR
        assert "response 2 was asked for" in conv.status_reason
        reopened_status = Conversation.open(store, conv.id).status
        assert reopened_status is Status.ERROR


def test_max_steps_stops_idle(store, workspace):
    responses = [{"tool_calls": [call("think", {"thought": f"{i}"})]} for i in range(5)]
    with scripted(store, workspace, responses) as conv:
        conv.send_message("go")
        assert conv.run(max_steps=2) is Status.IDLE
        assert sum(1 for k in kinds(conv) if k == "action") == 2


def test_callbacks_see_stored_events_and_a_failing_one_stops_nothing(store, workspace):
    seen = []

    def check_stored(stored):
        assert store.get_event(conv.id, stored.event.id).seq == stored.seq
        seen.append(stored.seq)

    def explode(_stored):
        raise RuntimeError("callback bug")

    with scripted(store, workspace, [FINISH]) as conv:
        conv.callbacks.extend([explode, check_stored])
        conv.send_message("finish")
        assert conv.run() is Status.FINISHED
    assert seen == list(range(seen[0], seen[0] + len(seen)))
    assert len(seen) >= 5


def test_secrets_are_masked_before_they_are_stored(store, workspace):
    secrets = Secrets({"API_KEY": "sk-live-123456789"})
    script = workspace.parent / "secret-script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [
                    {"tool_calls": [call("terminal", {"command": "echo $API_KEY"})]},
                    FINISH,
                ]
            }
        )
    )
    settings = ConversationSettings.scripted(script, workspace)
    with Conversation.create(store, settings, secrets=secrets) as conv:
        conv.send_message("print the key")
        conv.run()
        stored = json.dumps(
            [item.event.model_dump(mode="json") for item in store.get_range(conv.id, 0, 1000)]
        )
    assert "sk-live-123456789" not in stored
    assert "<secret:API_KEY>" in stored


def test_switch_branch_and_fork_keep_contexts_apart(store, workspace):
    responses = [{"text": "first answer"}, {"text": "second answer"}, {"text": "fork answer"}]
    with scripted(store, workspace, responses) as conv:
        first = conv.send_message("question one")
        conv.run()
        conv.send_message("question two")
        conv.run()
        conv.switch_branch(first.id)
        assert [m["content"] for m in conv.messages()][-1] == "question one"
        fork = conv.fork()
        assert fork.id != conv.id
        assert [e.id for e in fork.active_path()] == [e.id for e in conv.active_path()]
        fork.send_message("another question")
        texts = [e.text for e in fork.active_path() if e.kind == "message"]
        assert texts == ["question one", "another question"]  # no 'first answer' or 'question two'
        origin = store.get_conversation(fork.id).metadata["origin"]
        assert origin == {"forked_from": conv.id, "event_id": first.id}


def test_only_one_run_at_a_time(store, workspace):
    refused = []

    def run_again(stored):
        if stored.event.kind == "action":  # inside run(): a second run must be refused
            with pytest.raises(ConversationError, match="already running"):
                conv.run()
            refused.append(stored.event.id)

    with scripted(store, workspace, [FINISH]) as conv:
        conv.callbacks.append(run_again)
        conv.send_message("go")
        assert conv.run() is Status.FINISHED
    assert len(refused) == 1


def test_end_to_end_through_litellm_and_a_local_openai_server(store, workspace):
    replies = [
        {
            "text": "Two at once.",
            "tool_calls": [
                {"id": "c1", "name": "terminal", "arguments": {"command": "echo hello > h.txt"}},
                {"id": "c2", "name": "terminal", "arguments": '{"command": '},
            ],
        },
        {"tool_calls": [{"id": "c3", "name": "finish", "arguments": {"message": "ok"}}]},
    ]
    with FakeOpenAIServer(replies) as server:
        settings = ConversationSettings.litellm("openai/test-model", workspace, server.base_url)
        with Conversation.create(store, settings) as conv:
            conv.send_message("make h.txt")
            assert conv.run() is Status.FINISHED
            path = conv.active_path()
    assert (workspace / "h.txt").read_text() == "hello\n"
    assert [e.kind for e in path if e.kind in ("observation", "agent_error")] == [
        "observation",
        "agent_error",
        "observation",
    ]
    second_request = server.requests[1]["body"]["messages"]
    assistant = next(m for m in second_request if m["role"] == "assistant")
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    answered = [m["tool_call_id"] for m in second_request if m["role"] == "tool"]
    assert answered == ["c1", "c2"]
    usage = next(e for e in path if e.kind == "action").usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (11, 7)
