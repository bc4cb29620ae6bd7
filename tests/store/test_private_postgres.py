"""``make test`` on a machine without PostgreSQL: the suite gets a private server, removed after."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "support" / "private_postgres.py"

CHILD = """
import os, sys, psycopg
url = os.environ["TREADLE_TEST_POSTGRES"]
with psycopg.connect(url) as conn:
    conn.execute("CREATE TABLE t (x int)")
    conn.execute("INSERT INTO t VALUES (7)")
    assert conn.execute("SELECT x FROM t").fetchone() == (7,)
    port = conn.info.port
print(url)
print(port)
sys.exit(3)
"""


@pytest.mark.slow
def test_private_server_runs_the_command_and_is_removed_after(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--private", sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr  # the command's own exit code
    url, port = done.stdout.split()
    assert url.startswith("postgresql://postgres@127.0.0.1:")
    assert url.endswith("/test")
    folder = Path(done.stderr.strip().rsplit(" in ", 1)[1])
    assert folder.name.startswith("treadle-pg-")
    assert not folder.exists()
    with socket.socket() as probe:  # the server is stopped
        assert probe.connect_ex(("127.0.0.1", int(port))) != 0
    assert not list(Path("/tmp").glob("treadle-pg-*/data/postmaster.pid"))


def test_command_runs_as_it_is_when_a_server_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TREADLE_TEST_POSTGRES", "postgresql://nobody@127.0.0.1:1/none")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), sys.executable, "-c",
         "import os; print(os.environ['TREADLE_TEST_POSTGRES'])"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "postgresql://nobody@127.0.0.1:1/none"
