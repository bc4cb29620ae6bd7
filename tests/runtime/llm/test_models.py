"""The real LiteLLM path against a local OpenAI-compatible server, and the scripted model."""

from __future__ import annotations

import json

import pytest

from support.fake_openai import FakeOpenAIServer
from treadle.environment import model_environment
from treadle.runtime.llm import (
    LiteLLMModel,
    ModelEnvironment,
    ModelError,
    ModelRequest,
    ModelSettings,
    ScriptedModel,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
MESSAGES = [{"role": "user", "content": "list files and print the date"}]


def litellm_model(server: FakeOpenAIServer, **overrides) -> LiteLLMModel:
    settings = ModelSettings(
        model="openai/test-model", base_url=server.base_url, api_key="sk-test-secret", **overrides
    )
    return LiteLLMModel(settings, sleep=lambda _seconds: None)


def test_litellm_parallel_calls_usage_and_request_shape():
    replies = [
        {
            "tool_calls": [
                {"id": "c1", "name": "terminal", "arguments": {"command": "ls"}},
                {"id": "c2", "name": "terminal", "arguments": '{"command": "date"'},
            ]
        }
    ]
    with FakeOpenAIServer(replies) as server:
        response = litellm_model(server).complete(ModelRequest(MESSAGES, TOOLS))
    assert response.id == "chatcmpl-1"
    assert [(c.id, c.name) for c in response.tool_calls] == [("c1", "terminal"), ("c2", "terminal")]
    assert json.loads(response.tool_calls[0].arguments) == {"command": "ls"}
    assert response.tool_calls[1].arguments == '{"command": "date"'  # malformed kept verbatim
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (11, 7)
    request = server.requests[0]
    assert request["path"].endswith("/chat/completions")
    assert request["body"]["messages"] == MESSAGES
    assert request["body"]["tools"][0]["function"]["name"] == "terminal"
    assert {k.lower(): v for k, v in request["headers"].items()}[
        "authorization"
    ] == "Bearer sk-test-secret"


def test_litellm_retries_rate_limits_then_answers():
    with FakeOpenAIServer([{"status": 429}, {"status": 429}, {"text": "done"}]) as server:
        response = litellm_model(server).complete(ModelRequest(MESSAGES, TOOLS))
    assert response.text == "done"
    assert len(server.requests) == 3


def test_litellm_gives_up_after_max_retries_with_a_clear_error():
    with (
        FakeOpenAIServer([{"status": 429}] * 5) as server,
        pytest.raises(ModelError, match="failed after 3 attempts"),
    ):
        litellm_model(server, max_retries=2).complete(ModelRequest(MESSAGES, TOOLS))
    assert len(server.requests) == 3


def test_settings_never_expose_the_key():
    settings = ModelSettings.resolve(ModelEnvironment(model="openai/x", api_key="sk-very-secret"))
    assert settings.api_key == "sk-very-secret"
    assert "sk-very-secret" not in json.dumps(settings.public())


def test_no_model_configured_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TREADLE_MODEL", "openai/x")  # the runtime does not read it
    with pytest.raises(ModelError, match="--model"):
        ModelSettings.resolve(ModelEnvironment())


def test_scripted_model_finds_its_place_from_the_messages():
    model = ScriptedModel.from_responses(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}}]},
            {"text": "all done"},
        ]
    )
    first = model.complete(ModelRequest(MESSAGES, TOOLS))
    assert first.tool_calls[0].name == "terminal"
    assert json.loads(first.tool_calls[0].arguments) == {"command": "ls"}
    later = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": []}]
    assert model.complete(ModelRequest(later, TOOLS)).text == "all done"
    with pytest.raises(ModelError, match="2 responses"):
        model.complete(ModelRequest([*later, {"role": "assistant", "content": "all done"}], TOOLS))


# -- a provider that misbehaves (issue 10, items 17, 18, 20) -----------------------------------


def test_a_provider_that_never_answers_fails_within_the_total_deadline():
    with FakeOpenAIServer([{"hang": True}] * 5) as server:
        model = litellm_model(server, deadline_s=1.0, timeout_s=120.0)
        with pytest.raises(ModelError, match="within its deadline of 1 s") as raised:
            model.complete(ModelRequest(MESSAGES, TOOLS))
    assert "no answer from" in str(raised.value)
    assert len(server.requests) == 1  # the one attempt used up the deadline: no 120 s waits


def test_retry_after_is_honoured_and_each_retry_is_announced():
    waits: list[float] = []
    notices: list[str] = []
    settings = ModelSettings(model="openai/test-model", api_key="sk-x", deadline_s=60.0)
    with FakeOpenAIServer([{"status": 429, "retry_after": 7}, {"text": "done"}]) as server:
        model = LiteLLMModel(
            ModelSettings(**{**settings.__dict__, "base_url": server.base_url}),
            sleep=waits.append,
            on_retry=notices.append,
        )
        assert model.complete(ModelRequest(MESSAGES, TOOLS)).text == "done"
    assert waits[0] >= 7
    (notice,) = notices
    assert "rate limited" in notice
    assert "HTTP 429" in notice
    assert "as the provider asked" in notice
    assert "attempt 2 of 5" in notice


def test_a_retry_after_past_the_deadline_fails_at_once_saying_so():
    with (
        FakeOpenAIServer([{"status": 429, "retry_after": 3600}]) as server,
        pytest.raises(ModelError, match="it asked to wait 3600 s"),
    ):
        litellm_model(server, deadline_s=5.0).complete(ModelRequest(MESSAGES, TOOLS))
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ({"body": "<html>upstream says hi</html>"}, "answered with a body that is not JSON"),
        ({"cut": True}, "failed or was cut before an answer"),
        ({"status": 500}, "HTTP 500 from"),
    ],
)
def test_provider_failures_are_said_in_words(reply, words):
    with FakeOpenAIServer([reply] * 2) as server, pytest.raises(ModelError) as raised:
        litellm_model(server, max_retries=1).complete(ModelRequest(MESSAGES, TOOLS))
    message = str(raised.value)
    assert words in message
    assert message.startswith("model openai/test-model failed after 2 attempts: ")
    for noise in ("InternalServerError", "OpenAIException", "litellm.", "<", "object at 0x"):
        assert noise not in message


@pytest.mark.parametrize(
    ("payload_or_calls", "problem"),
    [
        (
            {"payload": {"id": "r1", "object": "chat.completion", "created": 1, "choices": []}},
            '"choices" is empty',
        ),
        ({"tool_calls": [{"id": "", "name": "terminal", "arguments": "{}"}]}, "has an empty id"),
    ],
)
def test_an_unusable_response_is_a_model_error_keeping_the_raw_response(payload_or_calls, problem):
    with (
        FakeOpenAIServer([payload_or_calls]) as server,
        pytest.raises(ModelError, match=problem) as raised,
    ):
        litellm_model(server).complete(ModelRequest(MESSAGES, TOOLS))
    assert raised.value.raw is not None
    assert json.loads(raised.value.raw)["id"] in ("r1", "chatcmpl-1")


def test_the_deadline_comes_from_the_environment_and_is_checked(monkeypatch):
    monkeypatch.setenv("TREADLE_MODEL_DEADLINE", "42.5")
    read = model_environment()  # the edge reads it; the runtime is given it
    assert ModelSettings.resolve(read, model="openai/x").deadline_s == 42.5
    assert ModelSettings.resolve(read, model="openai/x", deadline_s=3).deadline_s == 3
    assert ModelSettings.resolve(ModelEnvironment(), model="openai/x").deadline_s == 600.0
    bad = model_environment({"TREADLE_MODEL_DEADLINE": "soon"})
    with pytest.raises(ModelError, match="TREADLE_MODEL_DEADLINE='soon' is not a positive"):
        ModelSettings.resolve(bad, model="openai/x")
    assert ModelSettings.resolve(bad, model="openai/x", deadline_s=3).deadline_s == 3  # unused


@pytest.mark.parametrize(
    ("content", "where"),
    [
        ('[{"text": "hi"}]', "the file: Input should be a valid dictionary"),
        ('{"responses": [{"tool_calls": [{"arguments": {}}]}]}', "responses.0.tool_calls.0.name"),
    ],
)
def test_a_script_of_another_shape_is_one_line_saying_where_and_the_shape(tmp_path, content, where):
    """Not pydantic's dump (several lines ending in a link to its docs): where, and what a
    script looks like."""
    script = tmp_path / "script.json"
    script.write_text(content)
    with pytest.raises(ModelError) as caught:
        ScriptedModel.from_file(script)
    message = str(caught.value)
    assert "\n" not in message
    assert where in message
    assert '"responses": [' in message
    assert "errors.pydantic.dev" not in message


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_a_refusal_of_the_request_is_never_retried(status):
    """A bad key, a model the provider does not have, a request it refuses: asking again gets
    the same answer (and, for a real provider, is paid for or counts against the account)."""
    with FakeOpenAIServer([{"status": status}] * 3) as server, pytest.raises(ModelError) as raised:
        litellm_model(server, max_retries=2).complete(ModelRequest(MESSAGES, TOOLS))
    assert len(server.requests) == 1
    message = str(raised.value)
    assert f"HTTP {status} from" in message
    assert "attempts" not in message  # said as the provider's answer, not as a retry's end
    if status == 401:
        assert "check TREADLE_API_KEY" in message
