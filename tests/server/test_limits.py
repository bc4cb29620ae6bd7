"""The server's bounds (issue 10, items 4 and 15): request bodies are counted as they arrive,
chunked or not; an imported archive may unpack only so many bytes and members (413, its temp
folder removed); only ``--max-running`` conversations run at once (429 past it)."""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.server_process import ServerProcess

BODY_LIMIT = 100_000


@pytest.fixture(scope="module")
def limited(tmp_path_factory) -> Iterator[tuple[ServerProcess, Path]]:
    """A server with small limits, and the temp folder it unpacks imports in."""
    folder = tmp_path_factory.mktemp("limits")
    server_tmp = folder / "tmp"
    server_tmp.mkdir()
    process = ServerProcess(
        f"sqlite:///{folder / 'store.db'}",
        log_dir=folder,
        extra_args=[
            "--max-body-bytes",
            str(BODY_LIMIT),
            "--max-archive-bytes",
            "1000000",
            "--max-archive-members",
            "50",
            "--max-running",
            "1",
        ],
        env={"TMPDIR": str(server_tmp)},
    )
    yield process.start(), server_tmp
    process.stop()


def chunks(total: int, size: int = 16_384) -> Iterator[bytes]:
    """A body without Content-Length (sent chunked): only counting what arrives can stop it."""
    sent = 0
    while sent < total:
        yield b"x" * min(size, total - sent)
        sent += size


def post_chunked(url: str, total: int) -> httpx.Response:
    return httpx.post(
        url, content=chunks(total), headers={"content-type": "application/json"}, timeout=60
    )


@pytest.mark.parametrize("path", ["/api/conversations", "/api/conversations/import/openhands"])
def test_a_chunked_body_over_the_limit_is_413(limited, path):
    server, _tmp = limited
    response = post_chunked(server.base_url + path, 20 * BODY_LIMIT)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "body_too_large"
    assert str(BODY_LIMIT) in error["message"]
    assert httpx.get(f"{server.base_url}/health").status_code == 200


def test_a_declared_length_over_the_limit_is_413_before_reading(limited):
    server, _tmp = limited
    response = httpx.post(
        f"{server.base_url}/api/conversations",
        content=b"{" + b" " * (BODY_LIMIT + 10) + b"}",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


def test_a_chunked_body_under_the_limit_is_read(limited):
    server, _tmp = limited
    response = post_chunked(f"{server.base_url}/api/conversations", BODY_LIMIT // 2)
    assert response.status_code == 422  # read whole, then refused as JSON: not a 413
    assert response.json()["error"]["code"] == "invalid_request"


def tar_gz(members: list[tuple[str, int]]) -> bytes:
    """A .tar.gz of files of zeros (they compress a thousandfold)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, size in members:
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ([("bomb/zeros.bin", 50_000_000)], "bytes unpacked"),
        ([(f"many/f{i}", 1) for i in range(200)], "more than 50 members"),
    ],
    ids=["bytes", "members"],
)
def test_an_archive_over_its_caps_is_413_and_leaves_nothing(limited, members, words):
    server, server_tmp = limited
    archive = tar_gz(members)
    assert len(archive) < BODY_LIMIT  # small on the wire, large unpacked
    response = httpx.post(
        f"{server.base_url}/api/conversations/import/openhands", content=archive, timeout=60
    )
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "archive_too_large"
    assert words in error["message"]
    assert list(server_tmp.iterdir()) == []  # the import's temp folder is gone


def test_a_bad_archive_leaves_no_temp_folder(limited):
    server, server_tmp = limited
    response = httpx.post(
        f"{server.base_url}/api/conversations/import/openhands", content=b"not a tar", timeout=60
    )
    assert response.status_code == 422
    assert list(server_tmp.iterdir()) == []


def wait_until_not_running(base_url: str, conversation_id: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        view = httpx.get(f"{base_url}/api/conversations/{conversation_id}").json()
        if not view["running_here"]:
            return view
        time.sleep(0.05)
    raise AssertionError(f"{conversation_id} still runs after 30 s")


def test_runs_past_max_running_are_429_until_one_ends(limited, tmp_path):
    server, _tmp = limited
    workspace = tmp_path / "ws"
    workspace.mkdir()
    slow = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": "sleep 1"}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
    ]

    def create() -> str:
        settings = {
            "model": {"kind": "scripted", "responses": slow},
            "workspace": str(workspace),
        }
        body = json.dumps({"settings": settings})
        response = httpx.post(
            f"{server.base_url}/api/conversations",
            content=body,
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    first, second = create(), create()
    assert httpx.post(f"{server.base_url}/api/conversations/{first}/run").status_code == 202
    refused = httpx.post(f"{server.base_url}/api/conversations/{second}/run")
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "too_many_running"
    assert "--max-running" in error["message"]
    assert wait_until_not_running(server.base_url, second)["status"] != "running"

    wait_until_not_running(server.base_url, first)
    accepted = httpx.post(f"{server.base_url}/api/conversations/{second}/run")
    assert accepted.status_code == 202, accepted.text
    assert wait_until_not_running(server.base_url, second)["event_count"] > 0
