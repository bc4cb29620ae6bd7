"""``treadle serve`` says where it is and refuses, in one line, what would fail later (issue
26): a busy port, a --workspace-root that is not there; a banner with the Canvas URL, the store
(no password) and the auth mode; a warning for a host others reach without a key."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from support.cli import run_treadle


def test_a_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = run_treadle(
            "serve", "--port", str(port), "--store", f"sqlite:///{tmp_path / 's.db'}"
        )
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: port {port} on 127.0.0.1 is in use: give another --port"


def test_a_missing_workspace_root_is_refused(tmp_path: Path) -> None:
    done = run_treadle(
        "serve",
        "--workspace-root",
        str(tmp_path / "nope"),
        "--store",
        f"sqlite:///{tmp_path / 's.db'}",
    )
    assert done.returncode == 2
    assert "--workspace-root" in done.stderr
    assert "is not a folder" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_banner_names_the_canvas_store_and_auth_and_warns_for_an_open_host(
    tmp_path: Path,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("TREADLE_API_KEYS", "TREADLE_STORE")}
    server = subprocess.Popen(
        [sys.executable, "-m", "treadle", "serve", "--host", "0.0.0.0", "--port", str(port),
         "--store", store],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
        env=env,
    )  # fmt: skip
    said: list[str] = []
    try:
        deadline = time.monotonic() + 60
        assert server.stderr is not None
        while time.monotonic() < deadline and not any("auth:" in line for line in said):
            line = server.stderr.readline()
            if not line:
                break
            said.append(line)
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()
    text = "".join(said)
    assert f"Canvas at http://0.0.0.0:{port}/" in text
    assert f"store: {store}" in text
    assert "auth: none (no API key set)" in text
    assert "warning: --host 0.0.0.0 can be reached from other machines" in text
