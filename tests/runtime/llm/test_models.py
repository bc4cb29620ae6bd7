"""The real provider's two clients (LiteLLM, and the OpenAI-compatible one on the ``openai``
package) against a local OpenAI-compatible server, each behaviour checked on both; and the
scripted model."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from support.fake_openai import CONTEXT_EXCEEDED, FakeOpenAIServer
from treadle.environment import model_environment
from treadle.runtime.condense.condenser import stated_limit
from treadle.runtime.llm import (
    LiteLLMModel,
    ModelEnvironment,
    ModelError,
    ModelRequest,
    ModelSettings,
    OpenAICompatibleModel,
    ProviderModel,
    ScriptedModel,
)
from treadle.runtime.llm.base import ContextWindowExceeded
from treadle.runtime.llm.openai_model import shared_tls_context
from treadle.runtime.llm.provider import RAW_RESPONSE_LIMIT

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
KEY = "sk-test-secret-0123456789"
CLIENTS: dict[str, type[ProviderModel]] = {
    "litellm": LiteLLMModel,
    "openai": OpenAICompatibleModel,
}


@pytest.fixture(params=sorted(CLIENTS))
def client(request: pytest.FixtureRequest) -> type[ProviderModel]:
    """Each test taking it runs once per client: the same guarantees from both."""
    return CLIENTS[request.param]


def provider_model(
    client: type[ProviderModel],
    server: FakeOpenAIServer,
    model: str = "openai/test-model",
    **overrides,
) -> ProviderModel:
    settings = ModelSettings(model=model, base_url=server.base_url, api_key=KEY, **overrides)
    return client(settings, sleep=lambda _seconds: None)


def test_parallel_calls_usage_and_request_shape(client):
    replies = [
        {
            "tool_calls": [
                {"id": "c1", "name": "terminal", "arguments": {"command": "ls"}},
                {"id": "c2", "name": "terminal", "arguments": '{"command": "date"'},
            ]
        }
    ]
    with FakeOpenAIServer(replies) as server:
        response = provider_model(client, server).complete(ModelRequest(MESSAGES, TOOLS))
    assert response.id == "chatcmpl-1"
    assert [(c.id, c.name) for c in response.tool_calls] == [("c1", "terminal"), ("c2", "terminal")]
    assert json.loads(response.tool_calls[0].arguments) == {"command": "ls"}
    assert response.tool_calls[1].arguments == '{"command": "date"'  # malformed kept verbatim
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (11, 7)
    request = server.requests[0]
    assert request["path"].endswith("/chat/completions")
    assert request["body"]["messages"] == MESSAGES
    assert request["body"]["tools"][0]["function"]["name"] == "terminal"
    assert {k.lower(): v for k, v in request["headers"].items()}["authorization"] == f"Bearer {KEY}"
    assert request["body"]["model"] == "test-model"  # the provider's own name, as LiteLLM sends


def test_retries_rate_limits_then_answers(client):
    with FakeOpenAIServer([{"status": 429}, {"status": 429}, {"text": "done"}]) as server:
        response = provider_model(client, server).complete(ModelRequest(MESSAGES, TOOLS))
    assert response.text == "done"
    assert len(server.requests) == 3


def test_gives_up_after_max_retries_with_a_clear_error(client):
    with (
        FakeOpenAIServer([{"status": 429}] * 5) as server,
        pytest.raises(ModelError, match="failed after 3 attempts"),
    ):
        provider_model(client, server, max_retries=2).complete(ModelRequest(MESSAGES, TOOLS))
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


def test_a_provider_that_never_answers_fails_within_the_total_deadline(client):
    with FakeOpenAIServer([{"hang": True}] * 5) as server:
        model = provider_model(client, server, deadline_s=1.0, timeout_s=120.0)
        with pytest.raises(ModelError, match="within its deadline of 1 s") as raised:
            model.complete(ModelRequest(MESSAGES, TOOLS))
    assert "no answer from" in str(raised.value)
    assert len(server.requests) == 1  # the one attempt used up the deadline: no 120 s waits


def test_retry_after_is_honoured_and_each_retry_is_announced(client):
    waits: list[float] = []
    notices: list[str] = []
    settings = ModelSettings(model="openai/test-model", api_key="sk-x", deadline_s=60.0)
    with FakeOpenAIServer([{"status": 429, "retry_after": 7}, {"text": "done"}]) as server:
        model = client(
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


def test_a_retry_after_past_the_deadline_fails_at_once_saying_so(client):
    with (
        FakeOpenAIServer([{"status": 429, "retry_after": 3600}]) as server,
        pytest.raises(ModelError, match="it asked to wait 3600 s"),
    ):
        provider_model(client, server, deadline_s=5.0).complete(ModelRequest(MESSAGES, TOOLS))
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ({"body": "<html>upstream says hi</html>"}, "answered with a body that is not JSON"),
        ({"cut": True}, "failed or was cut before an answer"),
        ({"status": 500}, "HTTP 500 from"),
        ({"status": 502}, "HTTP 502 from"),
        ({"status": 503}, "HTTP 503 from"),
        ({"body": "x" * 8_000_000}, "answered with a body that is not JSON"),
    ],
)
def test_provider_failures_are_said_in_words(client, reply, words):
    with FakeOpenAIServer([reply] * 2) as server, pytest.raises(ModelError) as raised:
        provider_model(client, server, max_retries=1).complete(ModelRequest(MESSAGES, TOOLS))
    message = str(raised.value)
    assert words in message
    assert message.startswith("model openai/test-model failed after 2 attempts: ")
    for noise in (
        "InternalServerError",
        "OpenAIException",
        "litellm.",
        "Error code",
        "APIStatusError",
        "<",
        "object at 0x",
    ):
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
def test_an_unusable_response_is_a_model_error_keeping_the_raw_response(
    client, payload_or_calls, problem
):
    with (
        FakeOpenAIServer([payload_or_calls]) as server,
        pytest.raises(ModelError, match=problem) as raised,
    ):
        provider_model(client, server).complete(ModelRequest(MESSAGES, TOOLS))
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
def test_a_refusal_of_the_request_is_never_retried(client, status):
    """A bad key, a model the provider does not have, a request it refuses: asking again gets
    the same answer (and, for a real provider, is paid for or counts against the account)."""
    with FakeOpenAIServer([{"status": status}] * 3) as server, pytest.raises(ModelError) as raised:
        provider_model(client, server, max_retries=2).complete(ModelRequest(MESSAGES, TOOLS))
    assert len(server.requests) == 1
    message = str(raised.value)
    assert f"HTTP {status} from" in message
    assert "attempts" not in message  # said as the provider's answer, not as a retry's end
    if status == 401:
        assert "check TREADLE_API_KEY" in message


# -- what both clients keep besides retries (the OpenAI-compatible one's parity) ---------------


def test_each_attempt_has_its_own_timeout_within_the_deadline(client):
    """A provider that hangs once costs one attempt's timeout, then the call is retried."""
    with FakeOpenAIServer([{"hang": True}, {"text": "late but fine"}]) as server:
        model = provider_model(client, server, timeout_s=0.5, deadline_s=30.0)
        assert model.complete(ModelRequest(MESSAGES, TOOLS)).text == "late but fine"
    assert len(server.requests) == 2


def test_a_context_length_refusal_is_context_window_exceeded_stating_the_limit(client):
    with (
        FakeOpenAIServer([CONTEXT_EXCEEDED] * 3) as server,
        pytest.raises(ContextWindowExceeded) as raised,
    ):
        provider_model(client, server).complete(ModelRequest(MESSAGES, TOOLS))
    assert len(server.requests) == 1  # never retried as it is
    message = str(raised.value)
    assert message.startswith("model openai/test-model refused the request: its context window")
    assert stated_limit(message) == 8192  # what the condenser learns the window from


def test_usage_cost_window_and_token_counts_are_litellms_for_the_name(client):
    """A known name behind a base URL (a proxy serving gpt-4o-mini) is priced and has its
    window, as on LiteLLM's path; a local endpoint's own name has neither."""
    with FakeOpenAIServer([{"text": "priced"}, {"text": "free"}]) as server:
        known = provider_model(client, server, model="openai/gpt-4o-mini")
        local = provider_model(client, server)
        priced = known.complete(ModelRequest(MESSAGES)).usage
        free = local.complete(ModelRequest(MESSAGES)).usage
    assert (priced.prompt_tokens, priced.completion_tokens) == (11, 7)
    assert priced.cost_usd == pytest.approx(11 * 0.15e-6 + 7 * 0.6e-6)
    assert (free.model, free.cost_usd) == ("openai/test-model", 0.0)
    assert known.context_window() == 128_000
    assert local.context_window() is None
    assert local.count_tokens("hello there, model") == LiteLLMModel(
        ModelSettings("openai/test-model")
    ).count_tokens("hello there, model")


def test_the_key_is_in_no_repr_error_notice_or_kept_response(client):
    """A provider that echoes what it was sent (its error text, its body) never makes the key
    show up in what the runtime says or keeps."""
    echoed = f"invalid key {KEY} for this org"
    replies = [
        {"status": 500, "error": {"message": echoed, "type": "server_error"}},
        {"status": 401, "error": {"message": echoed, "type": "invalid_request_error"}},
    ]
    notices: list[str] = []
    with FakeOpenAIServer(replies) as server:
        model = provider_model(client, server)
        model.on_retry = notices.append
        with pytest.raises(ModelError) as raised:
            model.complete(ModelRequest(MESSAGES, TOOLS))
    assert KEY not in repr(model)
    assert "check TREADLE_API_KEY" in str(raised.value)
    for text in [*notices, str(raised.value)]:
        assert KEY not in text
        assert "invalid key <the API key> for this org" in text
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None  # nothing of the library chained: no key in a traceback
    junk = {"id": "r1", "object": "chat.completion", "choices": [], "note": KEY}
    with FakeOpenAIServer([{"payload": junk}]) as server, pytest.raises(ModelError) as kept:
        provider_model(client, server).complete(ModelRequest(MESSAGES, TOOLS))
    assert kept.value.raw is not None
    assert KEY not in kept.value.raw


@pytest.mark.parametrize(
    ("arguments", "kept"),
    [
        ('{"command": "ls"', '{"command": "ls"'),  # malformed: kept verbatim, parsed later
        ({"command": "ls"}, '{"command": "ls"}'),  # an object, not a string: as JSON
        (None, ""),
        ("{\\ud800}", "{\\ud800}"),
    ],
)
def test_tool_call_arguments_as_sent_are_kept_as_text(client, arguments, kept):
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "terminal", "arguments": arguments},
    }
    payload = {
        "id": "r1",
        "object": "chat.completion",
        "created": 1,
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
    }
    with FakeOpenAIServer([{"payload": payload}]) as server:
        response = provider_model(client, server).complete(ModelRequest(MESSAGES, TOOLS))
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [("c1", "terminal", kept)]


@pytest.mark.parametrize(
    "reply",
    [
        {"payload": {"id": "r1", "object": "chat.completion"}},  # no "choices" at all
        {"payload": [1, 2]},
        {"payload": {"id": "r1", "choices": [{"index": 0}]}},  # a choice without a message
        {"payload": {"id": "r1", "object": "chat.completion", "choices": [], "x": "y" * 9_000_000}},
    ],
)
def test_a_hostile_body_is_a_short_model_error(client, reply):
    with FakeOpenAIServer([reply] * 2) as server, pytest.raises(ModelError) as raised:
        provider_model(client, server, max_retries=1).complete(ModelRequest(MESSAGES, TOOLS))
    message = str(raised.value)
    assert message.startswith("model openai/test-model ")
    assert len(message) < 1000
    assert "Traceback" not in message
    assert raised.value.raw is None or len(raised.value.raw) <= RAW_RESPONSE_LIMIT + 10


def test_the_openai_client_sends_no_key_of_the_environment(monkeypatch):
    """No key given: a placeholder goes, never the process's OPENAI_API_KEY (the runtime reads
    no environment; a base URL of a client's choice must not see the operator's key)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment-0123")
    with FakeOpenAIServer([{"text": "hi"}]) as server:
        model = OpenAICompatibleModel(ModelSettings("openai/m", base_url=server.base_url))
        assert model.complete(ModelRequest(MESSAGES)).text == "hi"
        model.close()
    headers = {k.lower(): v for k, v in server.requests[0]["headers"].items()}
    assert headers["authorization"] == "Bearer no-key"


def test_the_openai_client_keeps_no_cookie_of_the_endpoint():
    replies = [{"text": "one", "headers": {"Set-Cookie": "session=abc; Path=/"}}, {"text": "two"}]
    with FakeOpenAIServer(replies) as server:
        model = OpenAICompatibleModel(ModelSettings("openai/m", base_url=server.base_url))
        assert model.complete(ModelRequest(MESSAGES)).text == "one"
        assert model.complete(ModelRequest(MESSAGES)).text == "two"
        model.close()
    second = {k.lower() for k in server.requests[1]["headers"]}
    assert "cookie" not in second
    assert server.requests[1]["path"] == "/v1/chat/completions"


def test_the_openai_client_sends_odd_text_and_each_calls_own_tools():
    """A lone surrogate a tool printed goes as a JSON escape (the request cannot fail to
    encode); the tool schemas, encoded once, are still each call's own when they change."""
    first_tools = [{"type": "function", "function": {"name": "a", "parameters": {}}}]
    second_tools = [{"type": "function", "function": {"name": "b", "parameters": {}}}]
    odd = [{"role": "user", "content": "a\ud800b \u00e9 \U0001f600"}]
    with FakeOpenAIServer([{"text": "1"}, {"text": "2"}, {"text": "3"}]) as server:
        model = OpenAICompatibleModel(ModelSettings("openai/m", base_url=server.base_url))
        model.complete(ModelRequest(odd, first_tools))
        model.complete(ModelRequest(MESSAGES, second_tools))
        model.complete(ModelRequest(MESSAGES, first_tools))
        model.close()
    bodies = [request["body"] for request in server.requests]
    assert bodies[0]["messages"] == odd
    assert [body["tools"] for body in bodies] == [first_tools, second_tools, first_tools]
    assert bodies[0]["model"] == "m"


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ({"status": 400, "body": "upstream said no"}, "upstream said no"),
        ({"status": 400, "error": {"message": "bad field", "code": "x"}}, "bad field"),
        ({"status": 403, "payload": ["not", "an", "object"]}, '["not", "an", "object"]'),
    ],
)
def test_the_openai_client_says_the_endpoints_own_words_of_a_refusal(reply, said):
    with FakeOpenAIServer([reply]) as server:
        model = provider_model(OpenAICompatibleModel, server)
        with pytest.raises(ModelError) as raised:
            model.complete(ModelRequest(MESSAGES))
        model.close()
    assert said in str(raised.value)
    assert str(reply["status"]) in str(raised.value)
    assert len(server.requests) == 1  # a refusal is not retried


def test_the_openai_clients_pool_is_its_own_and_closed_with_it():
    with FakeOpenAIServer([{"text": "one"}, {"text": "two"}]) as server:
        first = OpenAICompatibleModel(ModelSettings("openai/m", base_url=server.base_url))
        second = OpenAICompatibleModel(ModelSettings("openai/m", base_url=server.base_url))
        assert first.complete(ModelRequest(MESSAGES)).text == "one"
        assert second.complete(ModelRequest(MESSAGES)).text == "two"
        pools = [first._client, second._client]
        assert pools[0] is not pools[1]
        # ... but one TLS trust for the process: the CA bundle is loaded once, not per model.
        contexts = {id(pool._transport.inner._pool._ssl_context) for pool in pools}
        assert contexts == {id(shared_tls_context())}
        first.close()
        assert pools[0].is_closed
        assert not pools[1].is_closed
        with pytest.raises(ModelError, match="was closed"):
            first.complete(ModelRequest(MESSAGES))
        first.close()  # twice: harmless
        second.close()
    assert pools[1].is_closed


def test_only_an_openai_compatible_base_url_gets_the_openai_client():
    with pytest.raises(ModelError, match="openai/NAME and a base URL"):
        OpenAICompatibleModel(ModelSettings("anthropic/claude", base_url="http://x/v1"))
    with pytest.raises(ModelError, match="openai/NAME and a base URL"):
        OpenAICompatibleModel(ModelSettings("openai/gpt-4o"))


# -- an endpoint that answers too much, too slowly or too deeply (a hostile endpoint) ----------

MIB = 1024 * 1024


@pytest.mark.parametrize("declare", [False, True], ids=["chunked", "content-length"])
def test_a_body_past_the_cap_is_refused_and_never_held(declare):
    """64 MiB offered, a 1 MiB cap: the client stops reading near the cap (a declared length
    past it: before reading the body), keeps none of it, and does not ask again."""
    replies = [{"text": "warm"}, *[{"flood": 64 * MIB, "declare": declare}] * 2]
    with FakeOpenAIServer(replies) as server:
        model = provider_model(OpenAICompatibleModel, server, max_response_bytes=MIB)
        # Imports (the openai package's) are not what is measured.
        assert model.complete(ModelRequest(MESSAGES, TOOLS)).text == "warm"
        tracemalloc.start()
        try:
            with pytest.raises(ModelError) as raised:
                model.complete(ModelRequest(MESSAGES, TOOLS))
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert server.sent_done.wait(10)
        model.close()
    message = str(raised.value)
    assert message.startswith("model openai/test-model sent a response the runtime cannot use: ")
    assert f"{server.base_url} answered with a body" in message
    assert "limit of 1 MiB" in message
    assert len(server.requests) == 2  # the same answer next time: never retried
    assert peak < 8 * MIB  # not the 64 MiB, nor a copy of what was read
    assert server.sent[0] < 32 * MIB  # the client hung up: the rest was never sent


def test_an_endless_chunked_body_ends_at_the_cap():
    with FakeOpenAIServer([{"flood": None}]) as server:
        model = provider_model(OpenAICompatibleModel, server, max_response_bytes=MIB)
        with pytest.raises(ModelError, match="past the limit of 1 MiB"):
            model.complete(ModelRequest(MESSAGES, TOOLS))
        assert server.sent_done.wait(10)
        model.close()


def test_a_trickling_body_ends_at_each_attempts_timeout():
    """A byte every 50 ms: no read ever waits its 0.5 s, yet each attempt ends at 0.5 s (the
    whole answer is bounded, not only each read), and the call after its retries."""
    with FakeOpenAIServer([{"trickle": 0.05}] * 2) as server:
        model = provider_model(
            OpenAICompatibleModel, server, timeout_s=0.5, deadline_s=30.0, max_retries=1
        )
        started = time.monotonic()
        with pytest.raises(ModelError, match="failed after 2 attempts: no answer from"):
            model.complete(ModelRequest(MESSAGES, TOOLS))
        took = time.monotonic() - started
        model.close()
    assert len(server.requests) == 2
    assert 1.0 <= took < 10.0  # two attempts of 0.5 s each, not the trickle's lifetime


def test_a_trickling_body_ends_at_the_calls_deadline():
    with FakeOpenAIServer([{"trickle": 0.05}] * 3) as server:
        model = provider_model(OpenAICompatibleModel, server, timeout_s=120.0, deadline_s=1.0)
        with pytest.raises(ModelError, match="within its deadline of 1 s"):
            model.complete(ModelRequest(MESSAGES, TOOLS))
        model.close()
    assert len(server.requests) == 1


def test_a_compressed_body_is_refused_as_asked_for_none():
    """A decoded size is not bounded by the bytes received (a gzip bomb): none is asked for,
    and one sent anyway is refused."""
    payload = {"id": "r1", "object": "chat.completion", "created": 1, "choices": []}
    with FakeOpenAIServer([{"gzip": payload}] * 2) as server:
        model = provider_model(OpenAICompatibleModel, server)
        with pytest.raises(ModelError, match="gzip-compressed body though asked for none"):
            model.complete(ModelRequest(MESSAGES, TOOLS))
        model.close()
    assert len(server.requests) == 1
    headers = {k.lower(): v for k, v in server.requests[0]["headers"].items()}
    assert headers["accept-encoding"] == "identity"


def test_json_nested_too_deeply_is_a_model_error_not_a_crash(client):
    deep = '{"id": "r1", "choices": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with FakeOpenAIServer([{"body": deep}] * 3) as server, pytest.raises(ModelError) as raised:
        provider_model(client, server, max_retries=1).complete(ModelRequest(MESSAGES, TOOLS))
    message = str(raised.value)
    assert message.startswith("model openai/test-model ")
    assert "Recursion" not in message
    assert len(message) < 1000


def test_too_many_tool_calls_are_a_model_error(client):
    calls = [{"id": f"c{n}", "name": "terminal", "arguments": "{}"} for n in range(300)]
    with FakeOpenAIServer([{"tool_calls": calls}]) as server, pytest.raises(ModelError) as raised:
        provider_model(client, server).complete(ModelRequest(MESSAGES, TOOLS))
    assert "300 tool calls, more than the 256 allowed" in str(raised.value)
