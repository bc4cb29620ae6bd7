"""Issue 10, items 1, 12 and 13 against a real server: a path a client names is never opened
outside --workspace-root, the server's keys reach neither foreign base URLs nor tools, and a
workspace swapped for a symlink cannot lead file_editor out of the root."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.fake_openai import FakeOpenAIServer
from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from treadle.client import RemoteError, TreadleClient
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status
from treadle.store.urls import open_store

MODEL_KEY = "sk-server-model-key-0123456789abcdef"
AUTH_KEY = "treadle-auth-key-fedcba9876543210"


def _scripted(path: str, workspace: Path) -> dict:
    return {
        "settings": {"model": {"kind": "scripted", "script": path}, "workspace": str(workspace)}
    }


def test_script_paths_named_by_a_client_are_refused_unopened(
    server: ServerProcess, tmp_path: Path
) -> None:
    real_script = tmp_path / "script.json"
    real_script.write_text(json.dumps({"responses": [{"text": "hi"}]}))
    answers = []
    for path in ["/dev/zero", str(real_script), str(tmp_path / "missing.json"), "/proc/1/x"]:
        response = httpx.post(
            f"{server.base_url}/api/conversations", json=_scripted(path, tmp_path / "ws")
        )
        answers.append((response.status_code, response.json()["error"]))
    # One answer for every path: it tells a client nothing about what exists on the server.
    assert {json.dumps(answer) for answer in answers} == {json.dumps(answers[0])}
    status, error = answers[0]
    assert status == 422
    assert error["code"] == "script_path_refused"
    assert '"responses": [...]' in error["message"]
    assert httpx.get(f"{server.base_url}/health").status_code == 200


def test_a_stored_script_path_is_not_opened_by_the_server(
    server: ServerProcess, store_url: str, tmp_path: Path
) -> None:
    # As `treadle run --script` on the same store would leave it; the server must not read it.
    script = tmp_path / "cli-script.json"
    script.write_text(json.dumps({"responses": [{"text": "read by the server"}]}))
    settings = ConversationSettings.scripted(script, tmp_path / "ws")
    store = open_store(store_url)
    try:
        store.create_conversation("from-cli", metadata={"settings": settings.to_metadata()})
    finally:
        store.close()
    with TreadleClient(server.base_url) as client:
        conversation = client.conversation("from-cli")
        with pytest.raises(RemoteError) as caught:
            conversation.run()
        # Forking it is refused in the user's words: which file, and what would let it be read.
        with pytest.raises(RemoteError) as forked:
            conversation.fork()
    assert (caught.value.status, caught.value.code) == (409, "not_runnable")
    for refused in (caught.value, forked.value):
        assert str(script) in refused.message
        assert "inside its --workspace-root" in refused.message
        assert "treadle fork" in refused.message


@pytest.fixture
def rooted_server(store_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    root = tmp_path / "root"
    root.mkdir()
    process = ServerProcess(store_url, log_dir=tmp_path, workspace_root=root).start()
    yield process
    process.stop()
    assert_store_audits_clean(store_url)


def test_script_files_inside_the_root_are_read_only_when_regular(
    rooted_server: ServerProcess,
) -> None:
    root = rooted_server.workspace_root
    assert root is not None
    (root / "script.json").write_text(json.dumps({"responses": [{"text": "from a file"}]}))
    os.mkfifo(root / "fifo.json")  # would block a plain open() forever
    (root / "zero.json").symlink_to("/dev/zero")
    with TreadleClient(rooted_server.base_url) as client:
        inside = ConversationSettings.scripted(root / "script.json", root / "ws")
        conversation = client.create_conversation(inside)
        conversation.send_message("hi")
        assert conversation.run() is Status.FINISHED
        assert conversation.messages()[-1]["content"] == "from a file"

        with pytest.raises(RemoteError) as fifo:
            client.create_conversation(ConversationSettings.scripted(root / "fifo.json", root))
        assert fifo.value.status < 500
        assert "not a regular file" in fifo.value.message
        with pytest.raises(RemoteError) as device:  # a link inside that leads out
            client.create_conversation(ConversationSettings.scripted(root / "zero.json", root))
        assert (device.value.status, device.value.code) == (422, "script_path_refused")


def test_a_workspace_swapped_for_a_symlink_cannot_lead_out_of_the_root(
    rooted_server: ServerProcess, tmp_path: Path
) -> None:
    root = rooted_server.workspace_root
    assert root is not None
    outside = tmp_path / "outside"
    outside.mkdir()
    arguments = {"command": "create", "path": "pwned.txt", "file_text": "x"}
    create = {"tool_calls": [{"name": "file_editor", "arguments": arguments}]}
    with TreadleClient(rooted_server.base_url) as client:
        settings = ConversationSettings.scripted_inline([{"text": "ready"}, create], root / "a")
        cached = client.create_conversation(settings)
        cached.send_message("first")
        assert cached.run() is Status.FINISHED  # opened (and kept) by the server
        fresh = client.create_conversation(
            ConversationSettings.scripted_inline([create], root / "b")
        )
        for name in ("a", "b"):
            shutil.rmtree(root / name)
            (root / name).symlink_to(outside, target_is_directory=True)

        with pytest.raises(RemoteError) as at_start:  # checked again at the run's start
            cached.run()
        with pytest.raises(RemoteError) as at_message:  # at a message (it may snapshot)
            cached.send_message("write")
        with pytest.raises(RemoteError) as at_first:  # the first one, which snapshots
            fresh.send_message("write")
    for caught in (at_start, at_message, at_first):
        assert (caught.value.status, caught.value.code) == (409, "not_runnable")
        assert "outside the workspace root" in caught.value.message
    assert list(outside.iterdir()) == []


def _litellm_conversation(client: TreadleClient, base_url: str, workspace: Path):
    settings = ConversationSettings.litellm("openai/test-model", workspace, base_url=base_url)
    conversation = client.create_conversation(settings)
    conversation.send_message("hello")
    assert conversation.run() is Status.FINISHED
    return conversation


def test_the_server_key_goes_only_to_base_urls_its_operator_allowed(
    store_url: str, tmp_path: Path
) -> None:
    env = {"TREADLE_API_KEY": MODEL_KEY, "TREADLE_BASE_URL": "", "OPENAI_API_KEY": MODEL_KEY}
    with FakeOpenAIServer([{"text": "one"}, {"text": "two"}]) as fake:
        foreign = ServerProcess(store_url, log_dir=tmp_path, env=env).start()
        try:
            with TreadleClient(foreign.base_url) as client:
                _litellm_conversation(client, fake.base_url, tmp_path / "ws")
        finally:
            foreign.stop()
        allowed = ServerProcess(
            store_url,
            log_dir=tmp_path,
            env=env,
            # The same endpoint written differently (scheme case, trailing slash).
            extra_args=["--allow-base-url", fake.base_url.replace("http", "HTTP", 1) + "/"],
        ).start()
        try:
            with TreadleClient(allowed.base_url) as client:
                _litellm_conversation(client, fake.base_url, tmp_path / "ws")
        finally:
            allowed.stop()
    sent = [
        {name.lower(): value for name, value in request["headers"].items()}.get("authorization")
        for request in fake.requests
    ]
    assert sent == ["Bearer no-key", f"Bearer {MODEL_KEY}"]
    assert MODEL_KEY not in json.dumps(fake.requests[0])


def test_tools_inherit_no_key_and_auth_keys_stay_out_of_argv(
    store_url: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(f"# the server's accepted keys\n{AUTH_KEY}\n")
    leak = (
        'env; printf %s "$TREADLE_API_KEY$TREADLE_API_KEYS$OPENAI_API_KEY" | rev; '
        "tr '\\0' ' ' < /proc/$PPID/cmdline"
    )
    responses = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": leak}}]},
        {"text": "done"},
    ]
    env = {"TREADLE_API_KEY": MODEL_KEY, "OPENAI_API_KEY": MODEL_KEY, "TREADLE_API_KEYS": AUTH_KEY}
    server = ServerProcess(
        store_url, log_dir=tmp_path, env=env, extra_args=["--api-key-file", str(key_file)]
    ).start()
    try:
        assert server.process is not None
        assert AUTH_KEY not in Path(f"/proc/{server.process.pid}/cmdline").read_text()
        assert httpx.get(f"{server.base_url}/api/conversations").status_code == 401
        with TreadleClient(server.base_url, api_key=AUTH_KEY) as client:
            conversation = client.create_conversation(
                ConversationSettings.scripted_inline(responses, tmp_path / "ws")
            )
            conversation.send_message("print your keys")
            assert conversation.run() is Status.FINISHED
            output = next(m for m in conversation.messages() if m["role"] == "tool")["content"]
    finally:
        server.stop()
    assert "PATH=" in output  # the command ran and printed its environment
    for secret in (MODEL_KEY, AUTH_KEY, MODEL_KEY[::-1], AUTH_KEY[::-1]):
        assert secret not in output
    for name in ("TREADLE_API_KEY", "OPENAI_API_KEY"):
        assert f"{name}=" not in output


def test_create_app_reads_the_model_environment_once_and_hands_it_to_the_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from treadle.runtime.llm import ModelEnvironment
    from treadle.server.app import create_app

    monkeypatch.setenv("TREADLE_MODEL", "openai/operator-default")
    monkeypatch.setenv("TREADLE_BASE_URL", "http://operator.internal:8080/v1")
    monkeypatch.setenv("TREADLE_API_KEY", MODEL_KEY)
    monkeypatch.setenv("TREADLE_MODEL_DEADLINE", "42")
    app = create_app(f"sqlite:///{tmp_path / 'edge.db'}")
    for name in ("TREADLE_MODEL", "TREADLE_BASE_URL", "TREADLE_API_KEY"):
        monkeypatch.delenv(name)  # read at the edge already: later changes reach no run
    with TestClient(app):
        state = app.state.treadle
        assert state.policy.provides.model_environment == ModelEnvironment(
            model="openai/operator-default",
            base_url="http://operator.internal:8080/v1",
            api_key=MODEL_KEY,
            deadline="42",
        )
        assert state.runs.model_key == MODEL_KEY
        assert state.runs.policy is state.policy
