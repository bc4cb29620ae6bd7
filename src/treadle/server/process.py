"""``treadle serve`` in a child process on 127.0.0.1 and a free port: for tests, benchmarks and
scripts that need a real server they can start, kill (a crash) and stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ServerProcess:
    def __init__(
        self,
        store_url: str,
        *,
        api_keys: tuple[str, ...] = (),
        lease_ttl: float = 10.0,
        log_dir: Path | None = None,
        workspace_root: Path | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        sandbox_user: str | None = "root",
        workers: int | None = None,
    ) -> None:
        """``extra_args``: more ``treadle serve`` flags; ``env``: variables set for the server.
        ``sandbox_user``: its ``--sandbox-user`` (None: the server's default, nobody as root).
        root by default: the tests' and benchmarks' workspaces lie in private temporary
        folders (mode 0700) that another user cannot reach.
        ``workers``: its ``--workers`` (None: the server's default, ``limits.default_workers``)."""
        self.store_url = store_url
        self.api_keys = api_keys
        self.lease_ttl = lease_ttl
        self.port = free_port()
        self.log_dir = log_dir
        self.workspace_root = workspace_root
        self.extra_args = tuple(extra_args)
        self.sandbox_user = sandbox_user
        self.workers = workers
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        command = [sys.executable, "-m", "treadle", "serve", "--port", str(self.port)]
        command += ["--store", self.store_url, "--lease-ttl", str(self.lease_ttl)]
        if self.workspace_root is not None:
            command += ["--workspace-root", str(self.workspace_root)]
        for key in self.api_keys:
            command += ["--api-key", key]
        if self.sandbox_user is not None and os.geteuid() == 0:
            command += ["--sandbox-user", self.sandbox_user]
        if self.workers is not None:
            command += ["--workers", str(self.workers)]
        command += self.extra_args
        # The log file stays open for the child's lifetime; the child owns it after Popen.
        log = (
            open(self.log_dir / f"server-{self.port}.log", "wb")  # noqa: SIM115
            if self.log_dir
            else subprocess.DEVNULL
        )
        env = {**os.environ, "TREADLE_API_KEYS": "", **self.env}
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.monotonic() + 60  # N workers start on shared cores
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not start within 60 s")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no lease release (a crash)."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
