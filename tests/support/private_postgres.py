"""Runs a command (the test suite) with a PostgreSQL to talk to, starting a private one if needed.

``python tests/support/private_postgres.py [--private] COMMAND...``: when ``$TREADLE_TEST_POSTGRES``
is set, or a server answers at 127.0.0.1:5432 with a database ``test``, the command runs as it is.
Otherwise (or with ``--private``) a throw-away server is made in a temp folder on a free port
(Debian's ``postgresql`` package, installed with apt when missing), the command runs with
``$TREADLE_TEST_POSTGRES`` pointing at it, and the server and its folder are removed afterwards.
Its exit code is the command's.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

MACHINE_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


def machine_postgres_answers() -> bool:
    import psycopg

    try:
        with psycopg.connect(MACHINE_POSTGRES, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def postgres_bin_dir() -> Path:
    """The folder of initdb/pg_ctl, installing Debian's ``postgresql`` when there is none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        print("make test: installing PostgreSQL (apt-get install postgresql)", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-q", "postgresql"], check=True, env=env)
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            sys.exit("make test: apt installed postgresql but no initdb was found")
    return Path(found[-1]).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrivatePostgres:
    """A PostgreSQL server in a temp folder, owned by this object: ``stop`` removes it all."""

    def __init__(self) -> None:
        self.bin = postgres_bin_dir()
        self.folder = Path(tempfile.mkdtemp(prefix="treadle-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.started = False

    def _as_postgres(self, *argv: str) -> None:
        # initdb and pg_ctl refuse to run as root: run them as the postgres user.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, stdout=subprocess.DEVNULL)

    def start(self) -> str:
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._as_postgres(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=200"
        )
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"),
            "-w", "-o", options, "start",
        )  # fmt: skip
        self.started = True
        import psycopg

        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE test")
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def stop(self) -> None:
        try:
            if self.started:
                self._as_postgres(
                    str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"
                )
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def main(argv: list[str]) -> int:
    private = bool(argv) and argv[0] == "--private"
    command = argv[1:] if private else argv
    if not command:
        sys.exit("usage: private_postgres.py [--private] COMMAND...")
    if not private and (os.environ.get("TREADLE_TEST_POSTGRES") or machine_postgres_answers()):
        return subprocess.run(command).returncode
    server = PrivatePostgres()
    # A SIGTERM (CI's time limit) must still stop the server and remove its folder.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        url = server.start()
        print(f"make test: a private PostgreSQL at {url} in {server.folder}", file=sys.stderr)
        return subprocess.run(command, env={**os.environ, "TREADLE_TEST_POSTGRES": url}).returncode
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
