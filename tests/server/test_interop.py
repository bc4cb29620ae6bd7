"""OpenHands conversations in and out of the server as .tar.gz archives."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openhands"


def archive_of(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return buffer.getvalue()


def a_fixture() -> Path:
    return next(p for p in sorted(FIXTURES.rglob("base_state.json"))).parent


def test_import_then_export_round_trip(server):
    folder = a_fixture()
    url = f"{server.base_url}/api/conversations/import/openhands"
    response = httpx.post(
        url, content=archive_of(folder), headers={"content-type": "application/gzip"}
    )
    assert response.status_code == 200, response.text
    result = response.json()["results"][0]
    assert result["imported"], result
    conversation_id = result["conversation_id"]
    again = httpx.post(url, content=archive_of(folder)).json()["results"][0]
    assert not again["imported"]
    assert again["problems"][0]["code"] == "CONVERSATION-EXISTS"
    assert httpx.post(f"{url}?replace=true", content=archive_of(folder)).json()["imported"] == 1

    exported = httpx.get(f"{server.base_url}/api/conversations/{conversation_id}/export/openhands")
    assert exported.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(exported.content)) as tar:
        names = tar.getnames()
    assert f"{conversation_id}/base_state.json" in names
    events = [n for n in names if "/events/event-" in n]
    assert len(events) == result["event_count"]


def test_bad_archives_are_refused_clearly(server):
    url = f"{server.base_url}/api/conversations/import/openhands"
    garbage = httpx.post(url, content=b"not an archive")
    assert garbage.status_code == 422
    assert garbage.json()["error"]["code"] == "bad_archive"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    escaping = httpx.post(url, content=buffer.getvalue())
    assert escaping.status_code == 422
    assert not (
        Path(server.store_url.removeprefix("sqlite:///")).parent.parent / "escape.txt"
    ).exists()
