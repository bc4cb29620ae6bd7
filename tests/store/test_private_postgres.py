"""``make test`` on a machine without PostgreSQL: the suite gets a private server, removed after."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
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


@pytest.fixture
def own_temp() -> Iterator[Path]:
    """A temp folder for this test's server alone (others' servers are not counted); outside
    pytest's own, whose folders the ``postgres`` user that runs initdb may not enter."""
    folder = Path(tempfile.mkdtemp(prefix="treadle-pgtest-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_private_server_runs_the_command_and_is_removed_after(own_temp):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--private", sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(own_temp)},  # its folder, apart from other runs' servers
    )
    assert done.returncode == 3, done.stderr  # the command's own exit code
    url, port = done.stdout.split()
    assert url.startswith("postgresql://postgres@127.0.0.1:")
    assert url.endswith("/test")
    folder = Path(done.stderr.strip().rsplit(" in ", 1)[1])
    assert folder.name.startswith("treadle-pg-")
    assert folder.parent == own_temp
    assert not folder.exists()
    with socket.socket() as probe:  # the server is stopped
        assert probe.connect_ex(("127.0.0.1", int(port))) != 0
    assert not list(own_temp.glob("treadle-pg-*"))


def test_command_runs_as_it_is_when_a_server_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TREADLE_TEST_POSTGRES", "postgresql://nobody@127.0.0.1:1/none")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), sys.executable, "-c",
         "import os; print(os.environ['TREADLE_TEST_POSTGRES'])"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "postgresql://nobody@127.0.0.1:1/none"
