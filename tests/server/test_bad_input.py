"""Bad input to a real server gets a clear 4xx naming the problem, never a 500 (issue 10, item 8).

Every request here answered 500 before: workspaces that cannot be folders, unknown or repeated
tools, empty or odd conversation ids, lone surrogates (SQLite and PostgreSQL), out-of-range
cursors and offsets, and imports whose files hold NaN, deep nesting or a lone surrogate.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from support.server_process import ServerProcess

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "openhands" / "agent_errors"
FIXTURE_ID = "00000000-0000-4000-8000-000000000002"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """The workspace root: it holds a file, ``file``."""
    folder = tmp_path_factory.mktemp("bad-input") / "ws"
    folder.mkdir()
    (folder / "file").write_text("not a folder")
    return folder


@pytest.fixture(scope="module")
def confined(root: Path) -> Iterator[ServerProcess]:
    """One server (SQLite) for the module, its workspaces confined to ``root``."""
    store = root.parent / "store.db"
    process = ServerProcess(f"sqlite:///{store}", log_dir=root.parent, workspace_root=root)
    yield process.start()
    process.stop()


@pytest.fixture
def create_body(root: Path) -> Callable[..., dict]:
    def make(**fields: object) -> dict:
        settings = {
            "model": {"kind": "scripted", "responses": []},
            "workspace": str(root / "w"),
        }
        settings.update(fields.pop("settings", {}))  # type: ignore[arg-type]
        return {"settings": settings, **fields}

    return make


def post_json(base_url: str, path: str, raw: str) -> httpx.Response:
    """POST raw JSON text (so that it can spell a lone surrogate, which httpx would refuse)."""
    return httpx.post(
        base_url + path,
        content=raw.encode(),
        headers={"content-type": "application/json"},
        timeout=30,
    )


def assert_refused(response: httpx.Response, status: int, code: str, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    for word in words:
        assert word in error["message"], error


@pytest.mark.parametrize(
    ("workspace", "code", "word"),
    [
        ("\u0000", "bad_workspace", "NUL"),
        ("x" * 300, "bad_workspace", "File name too long"),
        ("file", "bad_workspace", "File exists"),
        ("/proc/1/root/x", "workspace_outside_root", "outside"),
        ("../elsewhere", "workspace_outside_root", "outside"),
        ("y" * 5000, "bad_workspace", "1024"),
    ],
)
def test_unusable_workspaces_are_422(confined, create_body, workspace, code, word):
    body = create_body(settings={"workspace": workspace})
    response = httpx.post(f"{confined.base_url}/api/conversations", json=body, timeout=30)
    assert_refused(response, 422, code, word)


def test_unknown_or_repeated_tools_are_422(confined, create_body):
    url = f"{confined.base_url}/api/conversations"
    nope = httpx.post(url, json=create_body(settings={"tools": ["nope"]}))
    assert_refused(nope, 422, "invalid_request", "'nope'", "terminal")
    twice = httpx.post(url, json=create_body(settings={"tools": ["think", "think"]}))
    assert_refused(twice, 422, "invalid_request", "think named more than once")


@pytest.mark.parametrize("bad_id", ["", "a/b", "..", ".hidden", "-x", "sp ace", "x" * 129, "é"])
def test_conversation_ids_outside_the_rule_are_422(confined, create_body, bad_id):
    listed = httpx.get(f"{confined.base_url}/api/conversations?limit=1000").json()["items"]
    response = httpx.post(f"{confined.base_url}/api/conversations", json=create_body(id=bad_id))
    assert response.status_code == 422, response.text
    assert "body.id" in response.json()["error"]["message"]
    assert httpx.get(f"{confined.base_url}/api/conversations?limit=1000").json()["items"] == listed


def test_ids_inside_the_rule_are_accepted(confined, create_body):
    for good in ["a", "conv-1", "0f1e2d3c-aaaa-4bbb-8ccc-123456789abc", "x_y.z:1", "z" * 128]:
        response = httpx.post(f"{confined.base_url}/api/conversations", json=create_body(id=good))
        assert response.status_code == 201, response.text
        assert httpx.get(f"{confined.base_url}/api/conversations/{good}").json()["id"] == good
        assert httpx.delete(f"{confined.base_url}/api/conversations/{good}").status_code == 204


def lone_surrogate_bodies(create_body: Callable[..., dict]) -> dict[str, str]:
    """Request bodies whose JSON spells a lone surrogate in the id, title or system prompt."""
    marker = "SURROGATE"
    bodies = {
        "id": create_body(id=marker),
        "title": create_body(title=f"a {marker}"),
        "system_prompt": create_body(settings={"system_prompt": marker}),
        "a key": create_body(settings={"model": {marker: 1}}),
    }
    return {name: json.dumps(body).replace(marker, "\\ud800") for name, body in bodies.items()}


@pytest.mark.parametrize("field", ["id", "title", "system_prompt", "a key"])
def test_lone_surrogates_are_422_on_sqlite(confined, create_body, field):
    response = post_json(
        confined.base_url, "/api/conversations", lone_surrogate_bodies(create_body)[field]
    )
    assert_refused(response, 422, "invalid_request", "lone surrogate")


@pytest.mark.postgres
def test_lone_surrogates_are_422_on_postgresql(postgres_store_url, tmp_path, create_body):
    server = ServerProcess(postgres_store_url, log_dir=tmp_path).start()
    try:
        for raw in lone_surrogate_bodies(create_body).values():
            response = post_json(server.base_url, "/api/conversations", raw)
            assert_refused(response, 422, "invalid_request", "lone surrogate")
        created = httpx.post(f"{server.base_url}/api/conversations", json=create_body()).json()
        message = post_json(
            server.base_url, f"/api/conversations/{created['id']}/messages", '{"text": "\\udfff"}'
        )
        assert_refused(message, 422, "invalid_request", "body.text")
        fork = post_json(
            server.base_url, f"/api/conversations/{created['id']}/fork", '{"title": "\\ud800"}'
        )
        assert_refused(fork, 422, "invalid_request", "body.title")
    finally:
        server.stop()


@pytest.mark.parametrize(
    "query",
    [
        "after_seq=1e23",
        "before_seq=-1e23",
        "after_seq=100000000000000000000000",
        "before_seq=-100000000000000000000000",
        "after_seq=9223372036854775808",
        "after_seq=-2",
        "order=desc&before_seq=-9223372036854775809",
    ],
)
def test_seq_cursors_outside_minus_one_to_int64_are_422(confined, create_body, query):
    server = confined
    created = httpx.post(f"{server.base_url}/api/conversations", json=create_body()).json()
    for route in ("events", "events/count"):
        response = httpx.get(f"{server.base_url}/api/conversations/{created['id']}/{route}?{query}")
        assert_refused(response, 422, "invalid_request", "_seq")


def test_seq_cursors_at_the_bounds_are_answered(confined, create_body):
    server = confined
    created = httpx.post(f"{server.base_url}/api/conversations", json=create_body()).json()
    base = f"{server.base_url}/api/conversations/{created['id']}/events"
    top = 2**63 - 1
    assert httpx.get(f"{base}?after_seq=-1").json() == {"items": [], "next_cursor": None}
    assert httpx.get(f"{base}?after_seq={top}").json()["items"] == []
    assert httpx.get(f"{base}?order=desc&before_seq={top}").json()["items"] == []
    assert httpx.get(f"{base}/count?before_seq=-1").json() == {"count": 0}


@pytest.mark.parametrize("offset", ["1e23", "100000000000000000000000", "9223372036854775808"])
def test_list_offsets_beyond_int64_are_422(confined, offset):
    response = httpx.get(f"{confined.base_url}/api/conversations?offset={offset}")
    assert_refused(response, 422, "invalid_request", "offset")
    top = httpx.get(f"{confined.base_url}/api/conversations?offset={2**63 - 1}")
    assert top.json() == {"items": [], "next_offset": None}


def archive_of(mutate: Callable[[Path], None], tmp_path: Path) -> bytes:
    folder = tmp_path / "fx"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(FIXTURE, folder)
    mutate(folder)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return buffer.getvalue()


def in_base_state(old: str, new: str) -> Callable[[Path], None]:
    def mutate(folder: Path) -> None:
        path = folder / "base_state.json"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))

    return mutate


def deep_base_state(folder: Path) -> None:
    path = folder / "base_state.json"
    path.write_text(path.read_text()[:-1] + ',"deep":' + "[" * 5000 + "]" * 5000 + "}")


def deep_event(folder: Path) -> None:
    path = sorted((folder / "events").iterdir())[1]
    path.write_text(path.read_text()[:-1] + ',"deep":' + "[" * 300 + "]" * 300 + "}")


@pytest.mark.parametrize(
    "mutate",
    [
        in_base_state('"timeout":300', '"timeout":NaN'),
        in_base_state('"test-model"', '"\\ud800"'),
        in_base_state(f'"{FIXTURE_ID}"', '"\\ud800"'),
        in_base_state(f'"{FIXTURE_ID}"', '"a/b"'),
        deep_base_state,
        deep_event,
    ],
    ids=["nan", "surrogate", "surrogate-id", "slash-id", "deep-base-state", "deep-event"],
)
def test_imports_the_store_cannot_hold_are_422_and_keep_what_was_there(confined, tmp_path, mutate):
    server = confined
    url = f"{server.base_url}/api/conversations/import/openhands"
    httpx.delete(f"{server.base_url}/api/conversations/{FIXTURE_ID}")
    good = httpx.post(url, content=archive_of(lambda _folder: None, tmp_path), timeout=60)
    assert good.status_code == 200, good.text
    before = httpx.get(f"{server.base_url}/api/conversations/{FIXTURE_ID}/path").json()

    response = httpx.post(f"{url}?replace=true", content=archive_of(mutate, tmp_path), timeout=60)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["imported"] == 0
    assert body["error"]["code"] == "not_imported"
    assert body["results"][0]["problems"], body
    # A refused replace keeps the conversation that was there.
    after = httpx.get(f"{server.base_url}/api/conversations/{FIXTURE_ID}/path")
    assert after.status_code == 200
    assert after.json() == before


def test_importing_an_existing_conversation_again_is_409(confined, tmp_path):
    server = confined
    url = f"{server.base_url}/api/conversations/import/openhands"
    httpx.delete(f"{server.base_url}/api/conversations/{FIXTURE_ID}")
    archive = archive_of(lambda _folder: None, tmp_path)
    assert httpx.post(url, content=archive, timeout=60).status_code == 200
    again = httpx.post(url, content=archive, timeout=60)
    assert_refused(again, 409, "conflict", "CONVERSATION-EXISTS")
