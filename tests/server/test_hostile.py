"""20 hostile requests of each kind issue 10 lists, against a real server: never a 500, and the
server's threads, fds and memory stay bounded (they do not grow with the number of requests)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from support.server_process import ServerProcess

ROUNDS = 20
BODY_LIMIT = 1_000_000


@pytest.fixture
def hostile_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "file").write_text("not a folder")
    process = ServerProcess(
        f"sqlite:///{tmp_path / 'store.db'}",
        log_dir=tmp_path,
        workspace_root=root,
        extra_args=["--max-body-bytes", str(BODY_LIMIT), "--max-archive-bytes", "10000000"],
    )
    yield process.start(), root
    process.stop()


def usage(pid: int) -> dict[str, int]:
    """Threads, open fds and resident memory (KiB) of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status)
    return {
        "threads": int(fields["Threads"]),
        "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
        "rss_kib": int(fields["VmRSS"].split()[0]),
    }


def hostile_requests(base: str, root: Path) -> dict[str, Callable[[httpx.Client], httpx.Response]]:
    def settings(**fields: object) -> dict:
        return {
            "model": {"kind": "scripted", "responses": []},
            "workspace": str(root / "w"),
            **fields,
        }

    def create(body: dict, surrogate: bool = False) -> Callable[[httpx.Client], httpx.Response]:
        raw = json.dumps(body)
        if surrogate:
            raw = raw.replace("SURROGATE", "\\ud800")
        headers = {"content-type": "application/json"}
        return lambda c: c.post(f"{base}/api/conversations", content=raw, headers=headers)

    def get(path: str) -> Callable[[httpx.Client], httpx.Response]:
        return lambda c: c.get(base + path)

    def chunked(path: str) -> Callable[[httpx.Client], httpx.Response]:
        def body() -> Iterator[bytes]:
            for _ in range(4 * BODY_LIMIT // 65_536):
                yield b"y" * 65_536

        return lambda c: c.post(base + path, content=body())

    def archive(members: list[tuple[str, bytes | int]]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, data in members:
                content = bytes(data) if isinstance(data, int) else data
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
        return buffer.getvalue()

    def imported(data: bytes) -> Callable[[httpx.Client], httpx.Response]:
        return lambda c: c.post(f"{base}/api/conversations/import/openhands", content=data)

    conversation = "hostile-target"
    events = f"/api/conversations/{conversation}/events"
    nan_state = b'{"id": "00000000-0000-4000-8000-00000000000a", "x": NaN}'
    deep_state = b'{"id": "00000000-0000-4000-8000-00000000000b", "x": ' + b"[" * 5000
    deep_state += b"]" * 5000 + b"}"
    surrogate_state = b'{"id": "\\ud800"}'
    return {
        "workspace NUL": create({"settings": settings(workspace="\u0000")}),
        "workspace 300 chars": create({"settings": settings(workspace="n" * 300)}),
        "workspace is a file": create({"settings": settings(workspace="file")}),
        "workspace /proc/1/root/x": create({"settings": settings(workspace="/proc/1/root/x")}),
        "tools nope": create({"settings": settings(tools=["nope"])}),
        "tools twice": create({"settings": settings(tools=["think", "think"])}),
        "id empty": create({"id": "", "settings": settings()}),
        "id with /": create({"id": "a/b", "settings": settings()}),
        "id surrogate": create({"id": "SURROGATE", "settings": settings()}, surrogate=True),
        "title surrogate": create({"title": "SURROGATE", "settings": settings()}, True),
        "prompt surrogate": create({"settings": settings(system_prompt="SURROGATE")}, True),
        "huge id": create({"id": "i" * 100_000, "settings": settings()}),
        "after_seq=1e23": get(f"{events}?after_seq=1e23"),
        "after_seq=10**23": get(f"{events}?after_seq={10**23}"),
        "before_seq=-1e23": get(f"{events}?before_seq=-1e23&order=desc"),
        "before_seq=-10**23": get(f"{events}/count?before_seq=-{10**23}"),
        "offset=1e23": get("/api/conversations?offset=1e23"),
        "offset=10**23": get(f"/api/conversations?offset={10**23}"),
        "path limit huge": get(f"/api/conversations/{conversation}/path?limit={10**30}"),
        "head NUL": get(f"/api/conversations/{conversation}/path?head=%00"),
        "text huge": get(f"{events}?text={'t' * 5000}"),
        "chunked body": chunked("/api/conversations"),
        "chunked import": chunked("/api/conversations/import/openhands"),
        "archive bomb": imported(archive([("bomb/zeros", 50_000_000)])),
        "archive garbage": imported(b"\x1f\x8b garbage"),
        "import NaN": imported(archive([("c/base_state.json", nan_state)])),
        "import deep": imported(archive([("c/base_state.json", deep_state)])),
        "import surrogate id": imported(archive([("c/base_state.json", surrogate_state)])),
    }


def test_hostile_requests_never_500_and_leave_resources_bounded(hostile_server):
    server, root = hostile_server
    assert server.process is not None
    base = server.base_url
    settings = {
        "model": {"kind": "scripted", "responses": []},
        "workspace": str(root / "w"),
    }
    made = httpx.post(
        f"{base}/api/conversations", json={"id": "hostile-target", "settings": settings}
    )
    assert made.status_code == 201, made.text
    requests = hostile_requests(base, root)
    statuses: dict[str, set[int]] = {name: set() for name in requests}

    def round_of_each(client: httpx.Client) -> None:
        for name, request in requests.items():
            statuses[name].add(request(client).status_code)

    # No keep-alive: a refused upload closes its connection, and each request stands alone.
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(timeout=60, limits=limits) as client:
        round_of_each(client)  # warm up: imports, thread pool, caches
        before = usage(server.process.pid)
        for _ in range(ROUNDS - 1):
            round_of_each(client)
        after = usage(server.process.pid)

    print(f"hostile: {ROUNDS} x {len(requests)} requests; before {before}, after {after}")
    server_errors = {name: codes for name, codes in statuses.items() if max(codes) >= 500}
    assert server_errors == {}
    assert all(min(codes) >= 400 for codes in statuses.values()), statuses
    assert httpx.get(f"{base}/health").status_code == 200
    # Bounded: a few threads or fds of slack, and memory that does not grow per request
    # (19 rounds x 28 kinds, with 4 MB uploads and 50 MB archive bombs among them).
    assert after["threads"] <= before["threads"] + 4, (before, after)
    assert after["fds"] <= before["fds"] + 8, (before, after)
    assert after["rss_kib"] <= before["rss_kib"] + 64 * 1024, (before, after)
    assert not [p for p in root.iterdir() if p.name not in {"file", "w"}]
