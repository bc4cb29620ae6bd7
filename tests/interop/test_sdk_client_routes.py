"""The /openhands routes under hostile input, spoken as the SDK's client speaks them (its
headers, bodies and socket handshake) from plain HTTP: keys, ids, sizes, nesting, paths out of
the workspace root, links and FIFOs, tool modules never imported, the client's model key
(never stored, never echoed, masked, gone after a restart until sent again), and two clients
racing ``/run`` and ``/respond_to_confirmation``."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from support.fake_openai import FakeOpenAIServer
from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from support.waiting import wait_until

API_KEY = "server-key-for-the-sdk-0123"
MODEL_KEY = "sk-client-model-key-987654321"
HEADERS = {"X-Session-API-Key": API_KEY}


RELEASE = threading.Event()
"""Set by a test when the model's answer to a HOLD message may come."""


def reply_for(body: dict[str, Any]) -> dict[str, Any]:
    """The fake model's answer, decided by the request (many tests share one provider)."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
    text = json.dumps(messages[-1].get("content"))
    if "HOLD" in text:
        RELEASE.wait(120)
    if "SAY-THE-KEY" in text:
        return {"tool_calls": [{"name": "terminal", "arguments": {"command": f"echo {MODEL_KEY}"}}]}
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo ran"}}]}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer([{"respond": reply_for}] * 200) as server:
        yield server


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oh-routes")


@pytest.fixture(scope="module")
def modules(root: Path) -> Path:
    """A tool module on the server's path that leaves a mark when imported."""
    folder = root / "modules"
    folder.mkdir()
    (folder / "treadle_oh_marker.py").write_text(
        f"open({str(root / 'imported')!r}, 'w').write('imported')\n"
    )
    return folder


@pytest.fixture(scope="module")
def server(root: Path, modules: Path) -> Iterator[ServerProcess]:
    store = f"sqlite:///{root / 'server.db'}"
    (root / "ws").mkdir()
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(modules)]))
    process = ServerProcess(
        store,
        api_keys=(API_KEY,),
        log_dir=root,
        workspace_root=root / "ws",
        env={"PYTHONPATH": path},
        extra_args=("--max-body-bytes", "200000"),
    ).start()
    yield process
    process.stop()
    assert_store_audits_clean(store)


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{server.base_url}/openhands", headers=HEADERS, timeout=60) as c:
        yield c


def agent(tools: list[str] | None = None, **llm: Any) -> dict[str, Any]:
    return {
        "kind": "Agent",
        "llm": {"model": "openai/test-model", "usage_id": "agent", **llm},
        "tools": [{"name": name} for name in (tools or ["terminal"])],
    }


def start(http: httpx.Client, root: Path, fake: FakeOpenAIServer, **fields: Any) -> httpx.Response:
    folder = root / "ws" / uuid.uuid4().hex[:8]
    body = {
        "agent": agent(base_url=fake.base_url, api_key=MODEL_KEY),
        "workspace": {"kind": "LocalWorkspace", "working_dir": str(folder)},
        "tool_module_qualnames": {},
        **fields,
    }
    return http.post("/api/conversations", json=body)


def wait_status(http: httpx.Client, cid: str, *wanted: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def reached() -> bool:
        found.update(http.get(f"/api/conversations/{cid}").json())
        return found["execution_status"] in wanted

    wait_until(reached, timeout_s=120, what=f"status {wanted}")
    return found


# -- keys and ids ---------------------------------------------------------------------------


def test_the_session_key_is_required_on_every_route(server: ServerProcess) -> None:
    base = f"{server.base_url}/openhands/api/conversations"
    httpx_get = functools.partial(httpx.get, timeout=60)
    assert httpx_get(f"{base}/{uuid.uuid4()}").status_code == 401
    wrong = httpx_get(f"{base}/{uuid.uuid4()}", headers={"X-Session-API-Key": "nope"})
    assert wrong.status_code == 401
    # The header means nothing on Treadle's own API (its key is a Bearer token).
    assert httpx_get(f"{server.base_url}/api/conversations", headers=HEADERS).status_code == 401
    bearer = httpx_get(f"{base}/{uuid.uuid4()}", headers={"Authorization": f"Bearer {API_KEY}"})
    assert bearer.status_code == 404


def socket_close_code(server: ServerProcess, conversation_id: str, key: str) -> int | None:
    url = f"ws://127.0.0.1:{server.port}/openhands/sockets/events/{conversation_id}"
    with connect(url, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "auth", "session_api_key": key}))
        try:
            while True:
                ws.recv(timeout=30)
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
    return None


def test_the_socket_closes_with_the_only_codes_the_client_gives_up_on(
    server: ServerProcess, http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    cid = start(http, root, fake).json()["id"]
    assert socket_close_code(server, cid, "wrong-key") == 4001
    assert socket_close_code(server, str(uuid.uuid4()), API_KEY) == 4004
    assert socket_close_code(server, "not-a-uuid", API_KEY) == 4004
    url = f"ws://127.0.0.1:{server.port}/openhands/sockets/events/{cid}"
    with connect(url, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "auth", "session_api_key": API_KEY}))
        first = json.loads(ws.recv(timeout=30))
    assert first["kind"] == "ConversationStateUpdateEvent"
    assert first["key"] == "full_state"
    assert first["value"]["execution_status"] == "idle"
    assert MODEL_KEY not in json.dumps(first)


def test_ids_pages_and_limits(http: httpx.Client, root: Path, fake: FakeOpenAIServer) -> None:
    assert http.get("/api/conversations/not-a-uuid").status_code == 422
    assert http.get(f"/api/conversations/{uuid.uuid4()}").status_code == 404
    cid = start(http, root, fake).json()["id"]
    search = f"/api/conversations/{cid}/events/search"
    assert http.get(search, params={"page_id": "x' OR 1"}).status_code == 422
    assert http.get(search, params={"page_id": "9" * 30}).status_code == 422
    assert http.get(search, params={"limit": 101}).status_code == 422
    assert http.get(search, params={"limit": 0}).status_code == 422
    assert http.get(search, params={"page_id": "999999"}).json() == {
        "items": [],
        "next_page_id": None,
    }
    assert http.get(search, params={"kind": "NoSuchKind"}).json()["items"] == []
    batch = http.get("/api/conversations", params={"ids": [cid, str(uuid.uuid4()), "x"]})
    assert [item and item["id"] for item in batch.json()] == [cid, None, None]
    # A second create with the same id is the same conversation (200), not a new one.
    again = start(http, root, fake, conversation_id=cid)
    assert again.status_code == 200
    assert again.json()["id"] == cid


# -- create: what is refused, naming why ------------------------------------------------------


def test_what_the_server_cannot_honour_is_refused_naming_it(
    http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    unknown = start(http, root, fake, agent=agent(["terminal", "browser_tool_set"]))
    assert unknown.status_code == 422
    assert "browser_tool_set" in unknown.text
    for field, value in (
        ("plugins", [{"source": "github:x/y"}]),
        ("client_tools", [{"name": "t"}]),
        ("hook_config", {"pre_tool_use": [{}]}),
    ):
        refused = start(http, root, fake, **{field: value})
        assert refused.status_code == 422, field
        assert field in refused.text
    acp = start(http, root, fake, agent={**agent(), "kind": "ACPAgent"})
    assert acp.status_code == 422
    outside = start(http, root, fake, workspace={"kind": "LocalWorkspace", "working_dir": "/etc"})
    assert outside.status_code == 422
    assert "outside the server's workspace root" in outside.text
    escape = str(root / "ws" / ".." / "..")
    sneaky = start(http, root, fake, workspace={"kind": "LocalWorkspace", "working_dir": escape})
    assert sneaky.status_code == 422


def test_tool_modules_the_client_names_are_never_imported(
    http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    made = start(http, root, fake, tool_module_qualnames={"terminal": "treadle_oh_marker"})
    assert made.status_code == 201
    assert made.json()["tool_module_qualnames"] == {}
    assert not (root / "imported").exists()


def test_bodies_too_large_too_deep_or_not_objects_are_refused(
    http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    assert http.post("/api/conversations", content=b"x" * 300_000).status_code == 413
    deep = "[" * 5000 + "]" * 5000
    assert http.post("/api/conversations", content=deep).status_code == 422
    assert http.post("/api/conversations", content="[1]").status_code == 422
    assert http.post("/api/conversations", content="{").status_code == 422
    cid = start(http, root, fake).json()["id"]
    events = f"/api/conversations/{cid}/events"
    assert http.post(events, json={"role": "assistant", "content": "x"}).status_code == 422
    image = {"role": "user", "content": [{"type": "image", "image_urls": ["x"]}]}
    assert http.post(events, json=image).status_code == 422
    assert (
        http.post(events, json={"content": [{"type": "text", "text": "a\0b"}]}).status_code == 422
    )
    title = http.patch(f"/api/conversations/{cid}", json={"title": "t" * 5000})
    assert title.status_code == 422
    assert (
        http.post(f"/api/conversations/{cid}/ask_agent", json={"question": "?"}).status_code == 501
    )
    assert http.post(f"/api/conversations/{cid}/condense").status_code == 409


# -- the workspace routes act only inside conversations' workspaces ---------------------------


def test_files_and_commands_stay_inside_a_conversations_workspace(
    http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    made = start(http, root, fake).json()
    folder = Path(made["workspace"]["working_dir"])
    (folder / "link").symlink_to("/etc")
    os.mkfifo(folder / "fifo")

    def upload(path: str) -> httpx.Response:
        return http.post("/api/file/upload", params={"path": path}, files={"file": ("f", b"x")})

    assert upload("relative/path").status_code == 400
    assert upload("/etc/treadle-should-not-exist").status_code == 403
    assert upload(str(folder / "link" / "evil")).status_code == 403
    assert upload(str(folder / ".." / ".." / "evil")).status_code == 403
    assert not (root / "evil").exists()
    assert upload(str(folder / "sub" / "ok.txt")).status_code == 200
    assert (folder / "sub" / "ok.txt").read_bytes() == b"x"
    assert upload(str(folder / "fifo")).status_code == 400

    def download(path: str) -> httpx.Response:
        return http.get("/api/file/download", params={"path": path})

    assert download("/etc/passwd").status_code == 403
    assert download(str(folder / "link" / "passwd")).status_code == 403
    assert download(str(folder / "fifo")).status_code == 400  # refused, never waited on
    assert download(str(folder / "missing")).status_code == 404
    assert download(str(folder / "sub" / "ok.txt")).content == b"x"

    def command(**body: Any) -> httpx.Response:
        return http.post("/api/bash/start_bash_command", json={"command": "pwd", **body})

    assert command().status_code == 400  # no cwd: never "anywhere"
    assert command(cwd="/tmp").status_code == 403
    assert command(cwd=str(folder / "link")).status_code == 403
    assert command(cwd=str(folder), timeout=10**9).status_code == 400
    started = command(cwd=str(folder), command="pwd; ls /etc/shadow 2>&1; echo done")
    assert started.status_code == 200
    command_id = started.json()["id"]
    output: dict[str, Any] = {}

    def finished() -> bool:
        page = http.get(
            "/api/bash/bash_events/search",
            params={"kind__eq": "BashOutput", "command_id__eq": command_id},
        ).json()
        output.update(page["items"][0] if page["items"] else {})
        return output.get("exit_code") is not None

    wait_until(finished, timeout_s=60, what="the command's end")
    assert output["stdout"].startswith(f"{folder}\n")
    assert output["stdout"].endswith("done\n")
    assert "No such file" in output["stdout"]  # the sandbox shows no host /etc/shadow


# -- the client's model key -------------------------------------------------------------------


def test_the_client_key_is_used_never_echoed_and_masked(
    http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    made = start(http, root, fake)
    assert made.status_code == 201
    assert MODEL_KEY not in made.text
    assert made.json()["agent"]["llm"]["api_key"] == "**********"
    cid = made.json()["id"]
    before = len(fake.requests)
    sent = http.post(
        f"/api/conversations/{cid}/events",
        json={"role": "user", "content": [{"type": "text", "text": "SAY-THE-KEY"}], "run": True},
    )
    assert sent.status_code == 200
    wait_status(http, cid, "finished", "error")
    used = fake.requests[before]
    assert {k.lower(): v for k, v in used["headers"].items()}["authorization"] == (
        f"Bearer {MODEL_KEY}"
    )
    events = http.get(f"/api/conversations/{cid}/events/search").json()["items"]
    observations = [e for e in events if e["kind"] == "ObservationEvent"]
    assert observations
    assert MODEL_KEY not in json.dumps(observations)
    assert MODEL_KEY not in http.get(f"/api/conversations/{cid}").text


def test_after_a_restart_the_run_waits_for_the_key_and_never_runs_keyless(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    store = f"sqlite:///{tmp_path / 'restart.db'}"
    first = ServerProcess(store, api_keys=(API_KEY,), log_dir=tmp_path).start()
    try:
        with httpx.Client(
            base_url=f"{first.base_url}/openhands", headers=HEADERS, timeout=60
        ) as http:
            cid = start(http, tmp_path, fake).json()["id"]
    finally:
        first.stop()
    second = ServerProcess(store, api_keys=(API_KEY,), log_dir=tmp_path).start()
    try:
        with httpx.Client(
            base_url=f"{second.base_url}/openhands", headers=HEADERS, timeout=60
        ) as http:
            before = len(fake.requests)
            message = {"role": "user", "content": [{"type": "text", "text": "go"}]}
            refused = http.post(f"/api/conversations/{cid}/events", json=message)
            assert refused.status_code == 400
            assert "LLM_API_KEY" in refused.text
            assert http.post(f"/api/conversations/{cid}/run").status_code == 400
            assert len(fake.requests) == before  # no model call went out, keyless or not
            secrets = {"secrets": {"LLM_API_KEY": MODEL_KEY}}
            assert http.post(f"/api/conversations/{cid}/secrets", json=secrets).status_code == 200
            assert http.post(f"/api/conversations/{cid}/events", json=message).status_code == 200
            assert http.post(f"/api/conversations/{cid}/run").status_code == 200
            wait_status(http, cid, "finished")
            used = {k.lower(): v for k, v in fake.requests[before]["headers"].items()}
            assert used["authorization"] == f"Bearer {MODEL_KEY}"
            other = {"secrets": {"GITHUB_TOKEN": "x"}}
            assert http.post(f"/api/conversations/{cid}/secrets", json=other).status_code == 422
    finally:
        second.stop()
    assert MODEL_KEY not in (tmp_path / "restart.db").read_bytes().decode("latin-1")


# -- two clients racing ------------------------------------------------------------------------


def test_run_and_reject_racing_are_served_one_after_the_other(
    http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    cid = start(http, root, fake, confirmation_policy={"kind": "AlwaysConfirm"}).json()["id"]
    message = {"role": "user", "content": [{"type": "text", "text": "do it"}], "run": True}
    assert http.post(f"/api/conversations/{cid}/events", json=message).status_code == 200
    wait_status(http, cid, "waiting_for_confirmation")
    answers: dict[str, int] = {}
    barrier = threading.Barrier(2)

    def call(name: str, path: str, body: dict[str, Any] | None) -> None:
        with httpx.Client(base_url=str(http.base_url), headers=HEADERS, timeout=60) as other:
            barrier.wait()
            answers[name] = other.post(path, json=body).status_code

    racers = [
        threading.Thread(target=call, args=("run", f"/api/conversations/{cid}/run", None)),
        threading.Thread(
            target=call,
            args=(
                "reject",
                f"/api/conversations/{cid}/events/respond_to_confirmation",
                {"accept": False, "reason": "no"},
            ),
        ),
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=120)
    # The SDK takes 200 (and a 409 from /run as "it runs"); never a 409 elsewhere.
    assert answers["reject"] == 200
    assert answers["run"] in (200, 409)
    final = wait_status(http, cid, "waiting_for_confirmation", "idle", "finished")
    events = http.get(f"/api/conversations/{cid}/events/search").json()["items"]
    first_call = next(e for e in events if e["kind"] == "ActionEvent")
    answered = [
        e
        for e in events
        if e["kind"] in ("ObservationEvent", "UserRejectObservation")
        and e.get("action_id") == first_call["id"]
    ]
    assert len(answered) == 1, (final["execution_status"], answered)


def test_a_pause_during_a_run_ends_it_and_the_socket_says_so(
    server: ServerProcess, http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    cid = start(http, root, fake).json()["id"]
    url = f"ws://127.0.0.1:{server.port}/openhands/sockets/events/{cid}"
    with connect(url, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "auth", "session_api_key": API_KEY}))
        assert json.loads(ws.recv(timeout=30))["key"] == "full_state"
        before = len(fake.requests)
        message = {"role": "user", "content": [{"type": "text", "text": "HOLD"}], "run": True}
        assert http.post(f"/api/conversations/{cid}/events", json=message).status_code == 200
        wait_until(lambda: len(fake.requests) > before, timeout_s=120, what="the model call")
        assert http.post(f"/api/conversations/{cid}/pause").status_code == 200
        RELEASE.set()  # the model answers; the run stops at its next safe point
        # Both come, in either order: the run's end (full_state) and the status change.
        seen: dict[str, str] = {}
        while seen.get("status") != "paused" or "full_state" not in seen:
            frame = json.loads(ws.recv(timeout=120))
            key, value = frame.get("key"), frame.get("value")
            if key == "execution_status":
                seen["status"] = value
            elif key == "full_state" and value["execution_status"] != "running":
                seen["full_state"] = value["execution_status"]
    assert seen == {"status": "paused", "full_state": "paused"}
    assert http.get(f"/api/conversations/{cid}").json()["execution_status"] == "paused"


def frames_until(ws: Any, done: Any) -> list[dict[str, Any]]:
    """The socket's frames up to and including the first for which ``done`` is true."""
    frames = []
    while True:
        frame = json.loads(ws.recv(timeout=120))
        frames.append(frame)
        if done(frame):
            return frames


def is_full_state(frame: dict[str, Any]) -> bool:
    return frame.get("key") == "full_state"


def test_full_state_is_sent_again_only_while_the_client_may_wait_for_a_run(
    server: ServerProcess, http: httpx.Client, root: Path, fake: FakeOpenAIServer
) -> None:
    """The SDK client ends its run's wait on the first ``full_state`` after its ``/run``: a
    ``GET`` while it may still wait for a run's end is answered on the socket, but once it
    has changed the conversation (here a pause) a ``GET`` must send none, or a late frame
    would end the next run's wait before that run ends."""
    cid = start(http, root, fake).json()["id"]
    url = f"ws://127.0.0.1:{server.port}/openhands/sockets/events/{cid}"
    with connect(url, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "auth", "session_api_key": API_KEY}))
        assert is_full_state(json.loads(ws.recv(timeout=30)))
        message = {"role": "user", "content": [{"type": "text", "text": "go"}]}
        assert http.post(f"/api/conversations/{cid}/events", json=message).status_code == 200
        assert http.post(f"/api/conversations/{cid}/run").status_code == 200
        ended = frames_until(
            ws, lambda f: is_full_state(f) and f["value"]["execution_status"] != "running"
        )
        assert ended[-1]["value"]["execution_status"] == "finished"
        # Still the run's client, polling as its wait loop does: answered on the socket once
        # the run has let the conversation go (until then a GET's nudge sends nothing).
        answered: list[dict[str, Any]] = []

        def polled() -> bool:
            assert http.get(f"/api/conversations/{cid}").status_code == 200
            with contextlib.suppress(TimeoutError):
                while not answered:
                    frame = json.loads(ws.recv(timeout=1))
                    if is_full_state(frame):
                        answered.append(frame)
            return bool(answered)

        wait_until(polled, timeout_s=60, what="a full_state answering the poll")
        assert answered[0]["value"]["execution_status"] == "finished"
        # It pauses, reads the state and sends a message: no full_state before the message.
        assert http.post(f"/api/conversations/{cid}/pause").status_code == 200
        assert http.get(f"/api/conversations/{cid}").json()["execution_status"] == "paused"
        again = {"role": "user", "content": [{"type": "text", "text": "later"}]}
        assert http.post(f"/api/conversations/{cid}/events", json=again).status_code == 200
        frames = frames_until(ws, lambda f: f.get("kind") == "MessageEvent")
    # (A poll above may have been answered twice, late: those frames say "finished".)
    told_paused = [
        f for f in frames if is_full_state(f) and f["value"]["execution_status"] == "paused"
    ]
    assert told_paused == []
