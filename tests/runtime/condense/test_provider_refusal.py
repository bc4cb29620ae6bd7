"""Through LiteLLM against a local OpenAI-compatible server (tests/support/fake_openai.py) that
refuses long prompts with 400 ``context_length_exceeded``: the run condenses, retries and goes
on; a server that always refuses ends in ERROR after one retry, never a loop; with condense off
the refusal is an ERROR that says so. The model is unknown to LiteLLM (no window), so only the
refusal triggers a condensation."""

from __future__ import annotations

import json
from pathlib import Path

from support.fake_openai import CONTEXT_EXCEEDED, FakeOpenAIServer
from support.openhands_folders import normalised as norm
from support.provider_history import assert_valid_provider_history
from treadle.events.projection import project_messages
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus

MODEL = "openai/treadle-test-local"  # a local endpoint's own name: LiteLLM knows no window


def think(number: int, size: int = 400) -> dict:
    # Distinct words, not one letter repeated: a tokenizer packs a run of "x" into a few
    # tokens (how few changes with LiteLLM's tokenizer), words count about the same in each.
    words = " ".join(f"w{number}n{k}" for k in range(size // 7))
    thought = f"step {number} {words}"[: size + 8]
    return {"tool_calls": [{"name": "think", "arguments": {"thought": thought}}]}


class RefusingServer:
    """Answers from ``steps`` in order; refuses (400) any request whose messages are longer
    than ``limit`` characters; answers a summary request (no tools) with a summary."""

    def __init__(self, steps: list[dict], limit: int) -> None:
        self.steps = list(steps)
        self.limit = limit
        self.accepted: list[dict] = []
        self.refused = 0
        self.summaries = 0

    def __call__(self, body: dict) -> dict:
        size = len(json.dumps(body["messages"]))
        if size > self.limit:
            self.refused += 1
            return CONTEXT_EXCEEDED
        if "tools" not in body:
            self.summaries += 1
            return {"text": f"summary {self.summaries}: the agent thought through earlier steps"}
        self.accepted.append(body)
        return self.steps.pop(0) if self.steps else {"text": "all done"}


def conversation_on(store, workspace: Path, server: FakeOpenAIServer, **fields) -> Conversation:
    settings = ConversationSettings.litellm(
        MODEL, workspace, base_url=server.base_url, tools=("think", "finish"), **fields
    )
    return Conversation.create(store, settings)


def test_a_refused_request_is_condensed_and_retried_and_the_run_goes_on(store, workspace):
    respond = RefusingServer([think(i) for i in range(30)], limit=9_000)
    server = FakeOpenAIServer([{"respond": respond}] * 200)
    with server, conversation_on(store, workspace, server) as conversation:
        conversation.send_message("think it through")
        status = conversation.run(max_steps=40)
        assert status is ConversationStatus.FINISHED, conversation.status_reason
        path = conversation.active_path()
    # Refused once: the window it learned then (half the refused request: the 8192 tokens
    # the refusal states cannot be it) sizes every later condensation, made before a refusal.
    assert respond.refused == 1
    condensations = [e for e in path if e.kind == "condensation"]
    assert len(condensations) >= 2  # it filled the window more than once
    assert len(condensations) == respond.summaries
    assert "context window is exceeded" in condensations[0].note
    assert all("over the budget" in event.note for event in condensations[1:])
    # What made each is recorded as such (the replay reads it, not the note's words).
    assert [event.trigger for event in condensations] == ["refusal"] + ["budget"] * (
        len(condensations) - 1
    )
    for event in condensations:
        assert event.summary.startswith("summary ")
        assert event.usage.model == MODEL
        assert event.usage.prompt_tokens == 11  # what the server said the summary call used
        assert event.llm_response_id.startswith("chatcmpl-")
    # All 30 thinks ran, in order, once each: no response was lost to a refusal.
    thoughts = [e.arguments["thought"].split()[1] for e in path if e.kind == "action"]
    assert thoughts == [str(i) for i in range(30)]
    for body in respond.accepted:
        assert_valid_provider_history(body["messages"])
    # The last accepted request is the projection of the path it was made from (LiteLLM
    # leaves out the null content of a tool-call message: ``normalised``).
    last_request = respond.accepted[-1]["messages"]
    assert norm(last_request) == norm(json.loads(json.dumps(project_messages(path[:-1]))))


def test_a_server_that_always_refuses_ends_in_error_after_one_retry(store, workspace):
    respond = RefusingServer([think(i) for i in range(3)], limit=10**9)
    with FakeOpenAIServer([{"respond": respond}] * 3 + [CONTEXT_EXCEEDED] * 10) as server:
        summary = {"respond": lambda body: {"text": "a summary"}}
        server.replies.insert(4, summary)  # refused, then the summary call, then refused
        with conversation_on(store, workspace, server) as conversation:
            conversation.send_message("think")
            status = conversation.run(max_steps=20)
            requests = len(server.requests)
            path = conversation.active_path()
    assert status is ConversationStatus.ERROR
    reason = conversation.status_reason
    assert "context window is exceeded" in reason
    assert "refused again after condensing once" in reason
    # 3 answered steps, the refused request, the summary call, the one retry: no loop.
    assert requests == 6
    assert [e.kind for e in path].count("condensation") == 1


def test_with_condense_off_a_refusal_is_an_error_that_says_so(store, workspace):
    server = FakeOpenAIServer([think(0), CONTEXT_EXCEEDED])
    with server, conversation_on(store, workspace, server, condense="off") as conversation:
        conversation.send_message("think")
        status = conversation.run(max_steps=5)
        requests = len(server.requests)
    assert status is ConversationStatus.ERROR
    assert "condensation is off" in conversation.status_reason
    assert requests == 2


class WindowServer:
    """A local endpoint with an 8,000-token window, counted as LiteLLM counts gpt-4o's
    tokens: any longer request is refused with the window stated in the refusal."""

    def __init__(self, steps: list[dict], window: int = 8_000) -> None:
        self.steps = list(steps)
        self.window = window
        self.accepted: list[dict] = []
        self.refused = 0

    def __call__(self, body: dict) -> dict:
        import litellm

        tokens = litellm.token_counter(model="gpt-4o", messages=body["messages"])
        if tokens > self.window:
            self.refused += 1
            error = dict(CONTEXT_EXCEEDED["error"])
            error["message"] = (
                f"This model's maximum context length is {self.window} tokens. However, your "
                f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
            )
            return {"status": 400, "error": error}
        if "tools" not in body:
            return {"text": "summary: the agent thought through earlier steps"}
        self.accepted.append(body)
        return self.steps.pop(0) if self.steps else {"text": "all done"}


def test_a_refusal_teaches_the_window_litellm_gets_wrong(store, workspace):
    """LiteLLM believes gpt-4o has a 128k window; this endpoint has 8,000 tokens. The first
    refusal states the window: it is learned (a ``context_limit`` fact), kept for the
    conversation, and what is kept shrinks to it: no second refusal, every step made."""
    respond = WindowServer([think(i, size=2_400) for i in range(20)])
    server = FakeOpenAIServer([{"respond": respond}] * 300)
    with server:
        settings = ConversationSettings.litellm(
            "openai/gpt-4o", workspace, base_url=server.base_url, tools=("think", "finish")
        )
        with Conversation.create(store, settings) as conversation:
            conversation.send_message("think it through")
            status = conversation.run(max_steps=40)
            assert status is ConversationStatus.FINISHED, conversation.status_reason
            path = conversation.active_path()
            learned = [
                event.value
                for item in store.get_range(conversation.id, 0, 10**6)
                if (event := item.event).kind == "state_change" and event.key == "context_limit"
            ]
        # Reopened, the conversation keeps what it learned.
        with Conversation.open(store, conversation.id) as reopened:
            assert reopened.condenser is not None
            assert reopened.condenser.budget == int(8_000 * 0.8)
    assert respond.refused == 1
    assert [(fact["tokens"], fact["source"]) for fact in learned] == [(8_000, "provider")]
    thoughts = [e.arguments["thought"].split()[1] for e in path if e.kind == "action"]
    assert thoughts == [str(i) for i in range(20)]
    for body in respond.accepted:
        assert_valid_provider_history(body["messages"])
