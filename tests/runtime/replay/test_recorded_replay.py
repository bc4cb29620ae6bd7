"""REPLAY-RECORDED through the real run loop: conversations made by really running the scripted
agent with the real tools (parallel calls, errors, duplicate call ids, rejections and
confirmations, condensations, several user turns) replay to the same events; a tampered log is
reported on exactly the event that was changed or dropped; bad input is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.fake_openai import CONTEXT_EXCEEDED, FakeOpenAIServer
from support.replays import FINISH, bash, call, calls, copy_with, raw_rows, recorded, without
from treadle.events.model import ActionEvent, AgentErrorEvent, CondensationEvent, ObservationEvent
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.conversation import Conversation
from treadle.runtime.replay import ReplayInputError, replay_recorded
from treadle.runtime.settings import ConversationSettings
from treadle.store.urls import open_store

NO_SANDBOX = {"sandbox": {"kind": "none"}}


def path_of(store, conversation_id):
    return store.path_to_root(conversation_id, store.head(conversation_id))


def mixed_responses():
    """Parallel calls (one response, three calls), a tool error, invalid arguments, a call id
    repeated inside a response (PROJECT-DUP-CALL), and a shell command."""
    return [
        calls(
            call("think", {"thought": "first"}),
            call("think", {"thought": "second"}),
            call("task_tracker", {"command": "view"}),
            text="Three things at once.",
        ),
        calls(
            call("file_editor", {"command": "view", "path": "missing.txt"}),
            call("terminal", {"command": "echo made > made.txt; cat made.txt"}),
        ),
        calls(call("terminal", {"wrong": 1})),  # invalid arguments: an agent error
        calls(
            call("think", {"thought": "a"}, id="same"), call("think", {"thought": "b"}, id="same")
        ),
        FINISH,
        {"text": "All done, anything else?"},
    ]


def test_parallel_calls_errors_and_two_user_turns_replay_to_the_same_events(
    store, store_file, workspace
):
    conversation = recorded(
        store, workspace, mixed_responses(), messages=("go", "and now?"), **NO_SANDBOX
    )
    before = raw_rows(store_file, conversation)
    path = path_of(store, conversation)
    actions = [e for e in path if isinstance(e, ActionEvent)]
    assert len({a.llm_response_id for a in actions[:3]}) == 1  # three calls, one response
    assert sum(isinstance(e, AgentErrorEvent) for e in path) >= 3  # view, arguments, dup id
    report = replay_recorded(store, conversation)
    assert report.divergences == []
    assert report.same
    assert report.replayed_events == report.recorded_events == len(path)
    # The replay went to a temporary store: nothing was written here.
    assert raw_rows(store_file, conversation) == before
    assert [info.id for info in store.list_conversations()] == [conversation]


def test_confirmations_and_rejections_replay_to_the_same_events(store, workspace):
    responses = [
        calls(
            call("terminal", {"command": "touch rejected.txt"}),
            call("terminal", {"command": "touch confirmed.txt"}),
        ),
        bash("ls"),
        FINISH,
    ]
    decisions = iter(["split", "confirm", "confirm"])

    def decide(conversation):
        pending = conversation.pending_actions()
        if next(decisions) == "split":  # reject the first call, confirm the second
            conversation.reject([pending[0].id], reason="not that one")
            conversation.confirm([pending[1].id])
        else:
            conversation.confirm()

    conversation = recorded(
        store,
        workspace,
        responses,
        decide=decide,
        confirmation=ConfirmationPolicy.ALWAYS,
        **NO_SANDBOX,
    )
    kinds = [e.kind for e in path_of(store, conversation)]
    assert "user_rejection" in kinds
    assert not (workspace / "rejected.txt").exists()
    report = replay_recorded(store, conversation)
    assert report.divergences == []
    assert report.replayed_events == len(kinds)


def test_a_condensed_conversation_replays_with_its_recorded_summaries(store, workspace):
    long = "x" * 900
    responses = [calls(call("think", {"thought": f"{i} {long}"})) for i in range(14)] + [FINISH]
    summaries = [f"summary number {i}" for i in range(20)]
    conversation = recorded(
        store,
        workspace,
        responses,
        summaries=summaries,
        tools=("think", "finish"),
        context_tokens=1500,
        **NO_SANDBOX,
    )
    path = path_of(store, conversation)
    condensations = [e for e in path if e.kind == "condensation"]
    assert len(condensations) >= 2
    assert [c.summary for c in condensations] == summaries[: len(condensations)]
    report = replay_recorded(store, conversation)
    assert report.divergences == []
    assert report.replayed_events == len(path)


def test_a_replay_up_to_an_earlier_head_replays_that_path_only(store, workspace):
    conversation = recorded(store, workspace, mixed_responses(), **NO_SANDBOX)
    path = path_of(store, conversation)
    middle = next(e for e in path if isinstance(e, ObservationEvent) and e.tool_name == "terminal")
    report = replay_recorded(store, conversation, middle.id)
    assert report.same, report.divergences
    assert report.head == middle.id
    assert report.replayed_events == [e.id for e in path].index(middle.id) + 1


def test_a_head_moved_back_to_the_system_prompt_replays_it(store, workspace):
    """Found by the random state machine: a path that is only the system prompt has no input
    (no message, no step), and the replay stored nothing ("no event for the recorded
    system_prompt")."""
    conversation = recorded(store, workspace, [FINISH], **NO_SANDBOX)
    first = path_of(store, conversation)[0]
    assert first.kind == "system_prompt"
    report = replay_recorded(store, conversation, first.id)
    assert report.same, report.divergences
    assert report.replayed_events == 1


@pytest.fixture
def elsewhere(tmp_path: Path):
    """A store for tampered logs (the runtime fixture's store audits clean after each test;
    these do not, by design)."""
    opened = open_store(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    yield opened
    opened.close()


def test_a_changed_observation_is_reported_on_that_event_only(elsewhere, workspace):
    conversation = recorded(elsewhere, workspace, mixed_responses(), **NO_SANDBOX)
    path = path_of(elsewhere, conversation)
    index = next(
        i
        for i, e in enumerate(path)
        if getattr(e, "tool_name", "") == "terminal" and isinstance(e, ObservationEvent)
    )
    target = path[index]

    def rename_tool(events):
        events[index] = events[index].model_copy(update={"tool_name": "file_editor"})
        return events

    tampered = copy_with(elsewhere, conversation, rename_tool)
    report = replay_recorded(elsewhere, tampered)
    assert not report.same
    (divergence,) = report.divergences
    assert divergence.contract == "REPLAY-RECORDED"
    assert divergence.event_id == target.id
    assert divergence.fields == ["tool_name"]
    assert divergence.expected == {"tool_name": "file_editor"}
    assert divergence.actual == {"tool_name": "terminal"}
    assert divergence.tool_call_id == target.tool_call_id


def test_a_changed_error_the_runtime_computes_itself_is_reported_on_that_event(
    elsewhere, workspace
):
    conversation = recorded(elsewhere, workspace, mixed_responses(), **NO_SANDBOX)
    path = path_of(elsewhere, conversation)
    index = next(
        i
        for i, e in enumerate(path)
        if isinstance(e, AgentErrorEvent) and "Invalid arguments" in e.error
    )

    def reword(events):
        events[index] = events[index].model_copy(update={"error": "Invalid arguments: none"})
        return events

    report = replay_recorded(elsewhere, copy_with(elsewhere, conversation, reword))
    (divergence,) = report.divergences
    assert divergence.event_id == path[index].id
    assert divergence.fields == ["error"]
    assert "Invalid arguments for terminal" in divergence.actual["error"]


def test_a_dropped_result_is_reported_once_where_it_is_missing(elsewhere, workspace):
    conversation = recorded(elsewhere, workspace, mixed_responses(), **NO_SANDBOX)
    path = path_of(elsewhere, conversation)
    # The second of the three parallel calls' results.
    index = next(
        i
        for i, e in enumerate(path)
        if isinstance(e, ObservationEvent) and e.tool_call_id == "call-0-1"
    )
    report = replay_recorded(
        elsewhere, copy_with(elsewhere, conversation, lambda p: without(p, index))
    )
    (divergence,) = report.divergences
    assert divergence.tool_call_id == "call-0-1"
    assert divergence.event_id is None  # the recording lacks it; the replay answered the call
    assert divergence.after_event_id == path[index - 1].id
    assert "no result for call 'call-0-1'" in divergence.actual["error"]


def test_a_dropped_user_message_is_an_input_not_a_divergence(elsewhere, workspace):
    conversation = recorded(elsewhere, workspace, [bash("echo one"), FINISH], **NO_SANDBOX)
    path = path_of(elsewhere, conversation)
    # The user's message dropped: it is an input, not something the runtime makes, so the
    # replay, fed without it, makes the rest alike (what REPLAY-RECORDED can and cannot see).
    index = next(i for i, e in enumerate(path) if e.kind == "message")
    report = replay_recorded(
        elsewhere, copy_with(elsewhere, conversation, lambda p: without(p, index))
    )
    assert report.same  # the message is an input: without it the runtime makes the rest alike
    assert report.replayed_events == len(path) - 1


def test_bad_input_is_refused_by_name(store, workspace):
    conversation = recorded(store, workspace, [FINISH], **NO_SANDBOX)
    with pytest.raises(ReplayInputError, match="'nope' does not exist"):
        replay_recorded(store, "nope")
    with pytest.raises(ReplayInputError, match="event 'nope' is not in conversation"):
        replay_recorded(store, conversation, "nope")
    fact = next(
        item.event.id
        for item in store.get_range(conversation, 0, 10**6)
        if item.event.kind == "state_change"
    )
    with pytest.raises(ReplayInputError, match="is a state change"):
        replay_recorded(store, conversation, fact)
    bare = store.create_conversation(title="imported, no settings")
    with pytest.raises(ReplayInputError, match="no events to replay"):
        replay_recorded(store, bare.id)


def test_a_conversation_condensed_after_provider_refusals_replays_the_same(store, workspace):
    """Through LiteLLM and a local OpenAI-compatible server that refuses long prompts: the
    recorded model refuses where the provider did, so the runtime condenses there again."""
    thoughts = [calls(call("think", {"thought": f"step {i} " + "x" * 400})) for i in range(12)]
    refused = []

    def respond(body):
        if len(json.dumps(body["messages"])) > 6_000:  # too long for this "provider"
            refused.append(body)
            return CONTEXT_EXCEEDED
        if "tools" not in body:
            return {"text": "summary: the agent thought through the earlier steps"}
        return thoughts.pop(0) if thoughts else {"text": "all done"}

    server = FakeOpenAIServer([{"respond": respond}] * 100)
    with server:
        settings = ConversationSettings.litellm(
            "openai/treadle-test-local", workspace, base_url=server.base_url, tools=("think", "finish"),
            **NO_SANDBOX,
        )  # fmt: skip
        with Conversation.create(store, settings) as conversation:
            conversation.send_message("think it through")
            conversation.run(max_steps=20)
            conversation_id = conversation.id
    path = path_of(store, conversation_id)
    assert refused
    assert any(e.kind == "condensation" for e in path)
    assert "refusal" in [e.trigger for e in path if isinstance(e, CondensationEvent)]
    report = replay_recorded(store, conversation_id)  # the server is gone: nothing is asked
    assert report.divergences == []
    assert report.replayed_events == len(path)
    # A log stored before condensations recorded their trigger: its notes still say which.
    older = copy_with(
        store,
        conversation_id,
        lambda events: [
            e.model_copy(update={"trigger": None}) if isinstance(e, CondensationEvent) else e
            for e in events
        ],
    )
    report = replay_recorded(store, older)
    assert report.divergences == []
    assert report.replayed_events == len(path)


def test_a_head_inside_a_batch_replays_up_to_it(store, workspace):
    conversation = recorded(store, workspace, mixed_responses(), **NO_SANDBOX)
    path = path_of(store, conversation)
    first_result = next(i for i, e in enumerate(path) if isinstance(e, ObservationEvent))
    report = replay_recorded(store, conversation, path[first_result].id)
    # The other two calls of that response were answered after the head: not a divergence.
    assert report.divergences == []
    assert report.recorded_events == first_result + 1


def test_a_pause_between_steps_replays_where_it_was_made(store, workspace):
    settings = ConversationSettings.scripted_inline(
        [bash("echo one"), bash("echo two"), FINISH], workspace, **NO_SANDBOX
    )
    with Conversation.create(store, settings) as conversation:
        conversation.send_message("go")
        conversation.run(max_steps=1)
        conversation.pause()  # the user's, between two steps
        conversation.run()
        conversation_id = conversation.id
    kinds = [e.kind for e in path_of(store, conversation_id)]
    assert kinds.index("pause") == 4  # after the first call's result
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []


def test_calls_a_head_move_left_unanswered_before_a_message_replay_as_recorded(store, workspace):
    """Found by the random state machine: the head moved into a batch (its calls pending,
    waiting), then a message came. The replay runs whole batches, so it answered those calls
    ("no recorded result") before the message: reported as events the recording lacks."""
    responses = [
        calls(call("think", {"thought": "a"}), call("think", {"thought": "b"})),
        FINISH,
        {"text": "on the moved branch"},
    ]
    conversation_id = recorded(store, workspace, responses, **NO_SANDBOX)
    path = path_of(store, conversation_id)
    second = [e for e in path if isinstance(e, ActionEvent)][1]
    with Conversation.open(store, conversation_id) as conversation:
        conversation.switch_branch(second.id)
        assert len(conversation.pending_actions()) == 2  # both results are off the path now
        conversation.send_message("and now?")
        assert len(conversation.pending_actions()) == 2  # a message answers no call
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []
    # The replay moved its head back into the batch as the user did: the same path.
    assert report.recorded_events == len(path_of(store, conversation_id))
    assert report.replayed_events == report.recorded_events


def test_a_pause_after_a_head_move_into_a_batch_replays_as_recorded(store, workspace):
    """Found by the random state machine: the head moved into the last batch (waiting), then
    the user paused. A replay that left the batch answered was not waiting, so its pause made
    no event ("the replay has no event for the recorded pause")."""
    responses = [calls(call("think", {"thought": "a"})), FINISH]
    conversation_id = recorded(store, workspace, responses, **NO_SANDBOX)
    action = next(e for e in path_of(store, conversation_id) if isinstance(e, ActionEvent))
    with Conversation.open(store, conversation_id) as conversation:
        conversation.switch_branch(action.id)
        conversation.pause()
    assert path_of(store, conversation_id)[-1].kind == "pause"
    report = replay_recorded(store, conversation_id)
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events
