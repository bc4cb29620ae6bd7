"""The real LiteLLM path against a local OpenAI-compatible server, and the scripted model."""

from __future__ import annotations

import json

import pytest

from support.fake_openai import FakeOpenAIServer
from treadle.runtime.llm import LiteLLMModel, ModelError, ModelSettings, ScriptedModel

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
        response = litellm_model(server).complete(MESSAGES, TOOLS)
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
        response = litellm_model(server).complete(MESSAGES, TOOLS)
    assert response.text == "done"
    assert len(server.requests) == 3


def test_litellm_gives_up_after_max_retries_with_a_clear_error():
    with (
        FakeOpenAIServer([{"status": 429}] * 5) as server,
        pytest.raises(ModelError, match="failed after 3 attempts"),
    ):
        litellm_model(server, max_retries=2).complete(MESSAGES, TOOLS)
    assert len(server.requests) == 3


def test_settings_never_expose_the_key(monkeypatch):
    monkeypatch.setenv("TREADLE_MODEL", "openai/x")
    monkeypatch.setenv("TREADLE_API_KEY", "sk-very-secret")
    settings = ModelSettings.from_env()
    assert settings.api_key == "sk-very-secret"
    assert "sk-very-secret" not in json.dumps(settings.public())


def test_no_model_configured_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TREADLE_MODEL", raising=False)
    with pytest.raises(ModelError, match="--model"):
        ModelSettings.from_env()


def test_scripted_model_finds_its_place_from_the_messages():
    model = ScriptedModel.from_responses(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}}]},
            {"text": "all done"},
        ]
    )
    first = model.complete(MESSAGES, TOOLS)
    assert first.tool_calls[0].name == "terminal"
    assert json.loads(first.tool_calls[0].arguments) == {"command": "ls"}
    later = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": []}]
    assert model.complete(later, TOOLS).text == "all done"
    with pytest.raises(ModelError, match="2 responses"):
        model.complete([*later, {"role": "assistant", "content": "all done"}], TOOLS)
