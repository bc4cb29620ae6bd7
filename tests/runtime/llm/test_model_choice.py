"""How a model is chosen from settings: inline scripted responses, script files read only as
regular files under a limit, which base URLs may receive this process's key (issue 10), which
client calls the provider (the OpenAI-compatible one for ``openai/NAME`` at a base URL, else
LiteLLM), and who closes it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from treadle.environment import model_environment
from treadle.runtime.llm import (
    LiteLLMModel,
    ModelEnvironment,
    ModelError,
    ModelSettings,
    OpenAICompatibleModel,
    ScriptedModel,
    provider_model,
)
from treadle.runtime.llm.base import ModelRequest
from treadle.runtime.llm.provider import normalize_base_url
from treadle.runtime.llm.scripted import MAX_SCRIPT_BYTES
from treadle.runtime.settings import (
    ConversationSettings,
    HostAllows,
    HostProvides,
    ModelChoice,
    SettingsPolicy,
    build_model,
)

KEY = "sk-process-key-0123456789"


def test_inline_responses_build_a_scripted_model(tmp_path: Path) -> None:
    settings = ConversationSettings.scripted_inline([{"text": "hi"}], tmp_path)
    stored = ConversationSettings.model_validate(settings.to_metadata())
    model = build_model(stored.model, SettingsPolicy(allows=HostAllows(trusted=False)))
    assert model.complete(ModelRequest([], [])).text == "hi"


def test_a_model_choice_names_exactly_what_its_kind_needs() -> None:
    with pytest.raises(ValidationError, match="exactly one of responses or script"):
        ModelChoice(kind="scripted")
    with pytest.raises(ValidationError, match="exactly one of responses or script"):
        ModelChoice(kind="scripted", script="s.json", responses=())
    with pytest.raises(ValidationError, match="scripted model only"):
        ModelChoice(kind="litellm", model="openai/x", responses=())


def test_script_files_must_be_regular_and_small(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"responses": [{"text": "ok"}]}))
    assert ScriptedModel.from_file(good).complete(ModelRequest([], [])).text == "ok"
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    with huge.open("wb") as file:
        file.truncate(MAX_SCRIPT_BYTES + 1)  # sparse: no disk used
    deep = tmp_path / "deep.json"
    deep.write_text('{"responses": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for path, reason in [
        ("/dev/zero", "not a regular file"),
        (fifo, "not a regular file"),
        (tmp_path, "not a regular file"),
        (huge, f"more than the {MAX_SCRIPT_BYTES} allowed"),
        (deep, "MAX_JSON_DEPTH"),  # was a RecursionError
    ]:
        with pytest.raises(ModelError, match=reason):
            ScriptedModel.from_file(path)


def test_untrusted_settings_open_script_files_only_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "s.json").write_text(json.dumps({"responses": [{"text": "inside"}]}))
    (tmp_path / "outside.json").write_text(json.dumps({"responses": [{"text": "outside"}]}))
    os.symlink(tmp_path / "outside.json", root / "link.json")
    policy = SettingsPolicy(allows=HostAllows(trusted=False, workspace_root=root))
    assert build_model(ModelChoice(kind="scripted", script="s.json"), policy).complete(
        ModelRequest([], [])
    ).text == ("inside")
    messages = set()
    for script in [str(tmp_path / "outside.json"), "link.json", "../missing.json", "/dev/zero"]:
        with pytest.raises(ModelError) as caught:
            build_model(ModelChoice(kind="scripted", script=script), policy)
        # The error quotes the path it was given, and otherwise says the same words whether
        # or not the path exists (no oracle for what is outside the root).
        assert repr(script) in str(caught.value)
        messages.add(str(caught.value).replace(repr(script), "PATH"))
    assert len(messages) == 1
    with pytest.raises(ModelError, match="only inside its --workspace-root"):  # no root: no file
        build_model(
            ModelChoice(kind="scripted", script=str(root / "s.json")),
            SettingsPolicy(allows=HostAllows(trusted=False)),
        )


def test_the_key_goes_only_to_allowed_base_urls() -> None:
    environment = ModelEnvironment(base_url="http://operator.internal:8080/v1", api_key=KEY)
    allowed = ["https://gateway.example.com/v1"]

    def key_for(base_url: str | None, key_base_urls: list[str] | None = allowed) -> str | None:
        settings = ModelSettings.resolve(
            environment, "openai/m", base_url, key_base_urls=key_base_urls
        )
        return settings.api_key

    assert key_for(None) == KEY  # the operator's endpoint (TREADLE_BASE_URL)
    assert key_for("http://OPERATOR.internal:8080/v1/") == KEY
    assert key_for("HTTPS://gateway.example.com:443/v1/") == KEY
    assert key_for("https://gateway.example.com.evil.net/v1") is None
    assert key_for("https://gateway.example.com/v1/other") is None
    assert key_for("http://127.0.0.1:9/v1") is None
    assert key_for("http://127.0.0.1:9/v1", None) == KEY  # trusted: the user's own choice
    settings = ModelSettings.resolve(
        environment, "openai/m", "http://127.0.0.1:9/v1", key_base_urls=()
    )
    assert settings.base_url == "http://127.0.0.1:9/v1"
    assert normalize_base_url("https://A.example.com/v1/") == "https://a.example.com/v1"


def test_the_key_is_not_in_the_settings_repr() -> None:
    settings = ModelSettings("openai/m", api_key=KEY)
    assert KEY not in repr(settings)
    assert KEY not in str(settings)


def test_build_model_takes_the_environment_from_the_policy_never_from_os_environ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TREADLE_API_KEY", KEY)
    monkeypatch.setenv("TREADLE_MODEL", "openai/from-environ")
    monkeypatch.setenv("TREADLE_BASE_URL", "http://operator.internal:8080/v1")
    with pytest.raises(ModelError, match="no model given"):  # nothing given: no model
        build_model(ModelChoice(kind="litellm"))
    bare = build_model(ModelChoice(kind="litellm", model="openai/m"))
    assert isinstance(bare, LiteLLMModel)
    assert (bare.settings.api_key, bare.settings.base_url) == (None, None)
    # The edge reads the environment once and the policy carries it to the runtime.
    policy = SettingsPolicy(provides=HostProvides(model_environment=model_environment()))
    given = build_model(ModelChoice(kind="litellm"), policy)
    assert isinstance(given, OpenAICompatibleModel)  # openai/NAME at the operator's base URL
    assert given.settings.model == "openai/from-environ"
    assert given.settings.base_url == "http://operator.internal:8080/v1"
    assert given.settings.api_key == KEY
    assert KEY not in repr(policy)  # the key stays out of the policy's repr too


def test_the_edge_reads_unset_and_empty_variables_as_none() -> None:
    read = model_environment({"TREADLE_MODEL": "", "TREADLE_API_KEY": KEY, "OTHER": "x"})
    assert read == ModelEnvironment(api_key=KEY)
    assert KEY not in repr(read)


@pytest.mark.parametrize(
    ("model", "base_url", "client"),
    [
        ("openai/llama-3-8b", "http://127.0.0.1:8000/v1", OpenAICompatibleModel),  # vLLM etc.
        ("openai/gpt-4o", "https://proxy.example.com/v1", OpenAICompatibleModel),
        ("openai/gpt-4o", None, LiteLLMModel),  # OpenAI's own endpoint
        ("gpt-4o", None, LiteLLMModel),
        ("anthropic/claude-sonnet-4", None, LiteLLMModel),
        ("ollama/llama3", "http://127.0.0.1:11434", LiteLLMModel),  # Ollama's own API
        ("openai/", "http://127.0.0.1:8000/v1", LiteLLMModel),  # no name: LiteLLM says why
    ],
)
def test_an_openai_compatible_base_url_gets_the_lean_client(model, base_url, client) -> None:
    chosen = provider_model(ModelSettings(model, base_url=base_url))
    assert type(chosen) is client
    built = build_model(ModelChoice(kind="litellm", model=model, base_url=base_url))
    assert type(built) is client


def test_the_parts_close_the_model_they_built_never_one_they_were_given(tmp_path: Path) -> None:
    from support.fake_openai import FakeOpenAIServer
    from treadle.runtime.parts import build_parts
    from treadle.store.urls import open_store

    store = open_store(f"sqlite:///{tmp_path / 'parts.db'}")
    with FakeOpenAIServer([{"text": "one"}, {"text": "two"}]) as server:
        settings = ConversationSettings.litellm(
            "openai/local", tmp_path / "ws", server.base_url, tools=("think", "finish")
        )
        built = build_parts(store, settings)
        model = built.agent.model
        assert isinstance(model, OpenAICompatibleModel)
        assert built.built_model is model
        assert model.complete(ModelRequest([{"role": "user", "content": "hi"}])).text == "one"
        built.close()
        with pytest.raises(ModelError, match="was closed"):
            model.complete(ModelRequest([]))
        mine = OpenAICompatibleModel(ModelSettings("openai/local", base_url=server.base_url))
        given = build_parts(store, settings, model=mine)
        assert given.built_model is None
        given.close()
        assert mine.complete(ModelRequest([{"role": "user", "content": "hi"}])).text == "two"
        mine.close()
    store.close()


def test_building_an_openai_compatible_model_imports_no_client_library() -> None:
    """The ``openai`` package (and LiteLLM) load on the first call, not when a model is built."""
    import subprocess
    import sys

    import treadle

    source = str(Path(treadle.__file__).resolve().parents[1])  # this checkout's treadle
    code = (
        "import sys\n"
        "from treadle.runtime.settings import ModelChoice, build_model\n"
        "build_model(ModelChoice(kind='litellm', model='openai/m', base_url='http://x/v1'))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'openai', 'litellm', 'httpx'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONPATH": source},
    )
    assert done.stdout.strip() == "[]"


def test_a_conversation_through_the_lean_client_never_imports_litellm(tmp_path: Path) -> None:
    """Its window and price come from LiteLLM's map file (importing LiteLLM costs ~5 s of CPU
    per process); a whole run to a local endpoint's own model name loads no LiteLLM."""
    import subprocess
    import sys

    import treadle

    source = str(Path(treadle.__file__).resolve().parents[1])
    code = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from support.fake_openai import FakeOpenAIServer\n"
        "from treadle.runtime.conversation import Conversation\n"
        "from treadle.runtime.settings import ConversationSettings\n"
        "from treadle.store.urls import open_store\n"
        "store = open_store('sqlite:///' + sys.argv[1] + '/s.db')\n"
        "finish = {'tool_calls': [{'name': 'finish', 'arguments': {'message': 'done'}}]}\n"
        "think = {'tool_calls': [{'name': 'think', 'arguments': {'thought': 'plan'}}]}\n"
        "with FakeOpenAIServer([think, finish]) as server:\n"
        "    settings = ConversationSettings.litellm('openai/local-model', sys.argv[1] + '/ws',\n"
        "        server.base_url, tools=('think', 'finish'))\n"
        "    conversation = Conversation.create(store, settings)\n"
        "    conversation.send_message('hi')\n"
        "    conversation.run()\n"
        "    print(conversation.status.value, len(server.requests))\n"
        "    conversation.close()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'openai', 'litellm'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(Path(__file__).resolve().parents[2])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": source},
    )
    assert done.returncode == 0, done.stderr
    status, imported = done.stdout.strip().splitlines()
    assert status == "finished 2"
    assert imported == "[]"  # neither LiteLLM nor the openai package: httpx alone


def test_the_model_map_answers_as_litellm_does_for_every_openai_model() -> None:
    """The window and price the lean client reads from the map file equal
    ``litellm.get_model_info``'s, for every OpenAI model the map holds and names it does not."""
    from treadle.runtime.llm.litellm_model import litellm_model_info
    from treadle.runtime.llm.model_map import _model_map, is_priced, openai_model_info, window_of

    known = _model_map()
    assert known is not None
    names = [
        name.removeprefix("openai/")
        for name, entry in known.items()
        if isinstance(entry, dict) and entry.get("litellm_provider") == "openai"
    ]
    assert len(names) > 50
    names += ["local-model", "llama3", "azure/gpt-4o", "anthropic/claude-3-opus-20240229"]
    for name in names:
        mine, theirs = openai_model_info(f"openai/{name}"), litellm_model_info(f"openai/{name}")
        assert (window_of(mine), is_priced(mine)) == (window_of(theirs), is_priced(theirs)), name
    assert window_of(openai_model_info("openai/gpt-4o")) == 128_000
    assert openai_model_info("openai/local-model") is None
