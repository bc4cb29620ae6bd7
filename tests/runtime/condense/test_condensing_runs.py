"""Runs that condense: a long scripted run under a small budget, the scripted model's place
and summaries, the fallback without a summary, condense off, and the context view the
condenser follows (it must equal the projection's view)."""

from __future__ import annotations

import json
from pathlib import Path

from support.provider_history import assert_valid_provider_history
from support.scripts import think_steps, write_script
from treadle.events.audit import audit_events
from treadle.events.projection import condensed_view, project_messages
from treadle.runtime.condense.context import ContextView, TokenSizes
from treadle.runtime.conversation import Conversation
from treadle.runtime.llm.base import ModelRequest
from treadle.runtime.llm.litellm_model import import_litellm
from treadle.runtime.llm.scripted import DEFAULT_SUMMARY, ScriptedModel
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus
from treadle.store.urls import open_store


class RecordingModel:
    """The scripted model, with every request it gets recorded (messages and responses before)."""

    def __init__(self, inner: ScriptedModel, fail_summaries: bool = False) -> None:
        self.inner = inner
        self.requests: list[list[dict]] = []
        self.summary_requests: list[list[dict]] = []
        self.fail_summaries = fail_summaries
        self.on_request = None

    @property
    def name(self) -> str:
        return self.inner.name

    def complete(self, request: ModelRequest):
        if request.purpose == "summary":
            self.summary_requests.append(list(request.messages))
            if self.fail_summaries:
                raise RuntimeError("the summary service is down")
            return self.inner.complete(request)
        self.requests.append(list(request.messages))
        if self.on_request is not None:
            self.on_request(request.messages)
        return self.inner.complete(request)


def run_scripted(
    store, workspace: Path, responses, *, budget, summaries=(), fail=False, script_in=None, **kw
):
    """``script_in``: a folder to write the script to, for settings that name the file rather
    than carry the responses inline (the run reads its conversation's settings at each step)."""
    model = RecordingModel(ScriptedModel.from_responses(responses, summaries), fail)
    if script_in is not None:
        script = write_script(script_in, responses)
        settings = ConversationSettings.scripted(script, workspace, context_tokens=budget, **kw)
    else:
        settings = ConversationSettings.scripted_inline(
            responses, workspace, context_tokens=budget, **kw
        )
    conversation = Conversation.create(store, settings, model=model)
    return conversation, model


def test_a_long_scripted_run_condenses_stays_under_budget_and_finishes(tmp_path, workspace):
    steps = 2_600  # 2 events a step: over 5,000 events on the path
    budget = 3_000  # the built-in tools' schemas alone take about 1,000
    # No fsync per append: this test is about the context, and the machine's disk would
    # make it minutes long.
    store = open_store(f"sqlite:///{tmp_path / 'long.db'}?durability=fast")
    # The script in a file: 2,600 responses inline in the settings, read at every step, made
    # this test cost minutes of CPU (quadratic in the steps), not the condensing it is about.
    conversation, model = run_scripted(
        store, workspace, think_steps(steps), budget=budget, script_in=tmp_path
    )
    litellm = import_litellm()
    tools = conversation.agent.tools.openai_schemas()
    tools_tokens = litellm.token_counter(model=model.name, messages=[], tools=tools)
    message_tokens: dict[str, int] = {}
    checked: list[int] = []
    largest: list[int] = [0]

    def request_tokens(messages) -> int:
        # LiteLLM's count of the request, message by message (cached: the same message recurs
        # in thousands of requests); each message counted alone costs a little more than
        # within the request, so this is an upper bound.
        total = tools_tokens
        for message in messages:
            key = json.dumps(message, sort_keys=True)
            if key not in message_tokens:
                message_tokens[key] = litellm.token_counter(model=model.name, messages=[message])
            total += message_tokens[key]
        return total

    def check(messages):
        # Every request: a valid provider history, under the budget as LiteLLM counts the
        # whole request, and, now and then and right after each condensation, exactly the
        # projection of the stored path.
        assert_valid_provider_history(list(messages))
        tokens = request_tokens(messages)
        assert tokens <= budget
        largest[0] = max(largest[0], tokens)
        path = conversation.active_path()
        if len(model.requests) % 97 == 0 or path[-1].kind == "condensation":
            assert list(messages) == project_messages(path)
            checked.append(len(model.requests))

    model.on_request = check
    with conversation:
        conversation.send_message("Think it through, step by step.")
        status = conversation.run(max_steps=steps + 5)
        assert status is ConversationStatus.FINISHED, conversation.status_reason
        path = conversation.active_path()
    condensations = [e for e in path if e.kind == "condensation"]
    assert len(condensations) >= 10
    assert all(c.summary == DEFAULT_SUMMARY and c.summary_offset == 2 for c in condensations)
    assert all(c.usage is not None and c.usage.prompt_tokens > 0 for c in condensations)
    assert len(model.requests) == steps + 1  # no response was used up by a summary
    assert len(model.summary_requests) == len(condensations)
    assert len(checked) > len(condensations)
    assert largest[0] > budget // 2  # the budget was used, not dodged
    # The log holds every event: every action and result is on the path, none is lost.
    kinds = [e.kind for e in path]
    assert kinds.count("action") == steps + 1
    assert kinds.count("observation") == steps + 1
    assert len(path) > 5_000
    every = [item.event for item in store.get_range(conversation.id, 0, 10**9)]
    assert audit_events(every).clean
    # The last request kept the head and a recent window; the model was sent far less
    # than the path holds.
    last = model.requests[-1]
    assert last[0]["role"] == "system"
    assert last[1]["role"] == "user"
    assert len(last) < 200
    store.close()


def test_the_scripted_model_answers_summaries_from_its_script(store, workspace):
    summaries = ["first summary", "second summary"]
    conversation, model = run_scripted(
        store, workspace, think_steps(60), budget=600, summaries=summaries
    )
    with conversation:
        assert conversation.run(max_steps=100) is ConversationStatus.FINISHED
        path = conversation.active_path()
    texts = [e.summary for e in path if e.kind == "condensation"]
    assert texts[:2] == summaries
    assert len(texts) > 2
    assert set(texts[2:]) == {DEFAULT_SUMMARY}
    # The summary request holds what is forgotten (the earlier summary among it, later on).
    assert "step 0" in json.dumps(model.summary_requests[0])
    assert "first summary" in json.dumps(model.summary_requests[1])
    # The summary is sent where it stands: after the first user message, merged with it.
    final = model.requests[-1]
    assert texts[-1] in json.dumps(final[1])


def test_a_failed_summary_call_still_condenses_and_says_so(store, workspace):
    conversation, model = run_scripted(store, workspace, think_steps(40), budget=500, fail=True)
    with conversation:
        assert conversation.run(max_steps=60) is ConversationStatus.FINISHED
        path = conversation.active_path()
    condensations = [e for e in path if e.kind == "condensation"]
    assert condensations
    for event in condensations:
        assert event.summary is None
        assert event.summary_offset is None
        assert event.usage is None
        assert "no summary: the summary call failed" in event.note
        assert "the summary service is down" in event.note
    for messages in model.requests:
        assert_valid_provider_history(messages)


def test_condense_off_sends_the_whole_path(store, workspace):
    conversation, model = run_scripted(
        store, workspace, think_steps(30), budget=300, condense="off"
    )
    with conversation:
        assert conversation.run(max_steps=40) is ConversationStatus.FINISHED
        path = conversation.active_path()
    assert not [e for e in path if e.kind == "condensation"]
    assert len(model.requests[-1]) == 1 + 2 * 30  # the system prompt, 30 calls with results


def test_a_reopened_conversation_continues_at_its_place_after_condensing(store, workspace):
    responses = think_steps(30)
    conversation, _model = run_scripted(store, workspace, responses, budget=400)
    with conversation:
        conversation.send_message("go")
        assert conversation.run(max_steps=12) is ConversationStatus.IDLE
    # Another process: the stored settings, the stored path; the script's place is the
    # number of model turns on the path, not the (condensed) messages.
    with Conversation.open(store, conversation.id) as reopened:
        assert reopened.run(max_steps=40) is ConversationStatus.FINISHED
        actions = [e for e in reopened.active_path() if e.kind == "action"]
    thoughts = [a.arguments.get("thought") for a in actions if a.tool_name == "think"]
    assert thoughts == [f"step {i}" for i in range(30)]
    assert any(e.kind == "condensation" for e in reopened.active_path())


def test_the_context_view_follows_the_projection_view(store, workspace):
    conversation, _model = run_scripted(store, workspace, think_steps(50), budget=500)
    sizes = TokenSizes(lambda text: len(text) // 4)
    view = ContextView(sizes)
    seen = 0
    with conversation:
        conversation.send_message("go")
        while conversation.run(max_steps=3) is ConversationStatus.IDLE:
            path = conversation.active_path()
            view.follow(path)
            expected = condensed_view(path)
            assert [item.id for item in view.view] == [item.id for item in expected]
            assert view.total == sum(sizes.size(item) for item in expected)
            seen += 1
    path = conversation.active_path()
    view.follow(path)
    fresh = ContextView(sizes)
    fresh.follow(path)  # read from the root: the same as followed step by step
    assert [item.id for item in fresh.view] == [item.id for item in view.view]
    assert (fresh.total, fresh.model_responses, fresh.condensations) == (
        view.total,
        view.model_responses,
        view.condensations,
    )
    assert fresh.model_responses == 51  # 50 thinks and the finish
    assert fresh.call_ids == view.call_ids
    assert fresh.call_ids == {e.tool_call_id for e in path if e.kind == "action"}
    assert fresh.condensations > 0
    assert seen > 5
