"""The tests' real server process: the package's own helper, on a port no other process on the
host is handed meanwhile, so that servers of tests running in parallel never meet.

The package's ``free_port`` asks the kernel for an ephemeral port and lets it go; until the
child binds it (seconds, on a loaded machine) any outgoing connection or ``bind(0)`` on the host
may be given the same port. Here the port is drawn at random from below the kernel's ephemeral
range, which the kernel never hands out on its own, and a start that lost the port anyway
(another test drew it first) is retried on a new one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Any

from treadle.server.process import ServerProcess as _PackageServerProcess
from treadle.server.process import free_port

_LOWEST = 10_000


def _ephemeral_floor() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    return max(low, _LOWEST + 1_000)


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def unassigned_port() -> int:
    """A free port on 127.0.0.1 outside the kernel's ephemeral range."""
    floor = _ephemeral_floor()
    for _ in range(200):
        port = random.randrange(_LOWEST, floor)
        if _bindable(port):
            return port
    return free_port()  # a crowded host: the kernel's choice


TEST_SERVER_WORKERS = 2


class ServerProcess(_PackageServerProcess):
    """``treadle serve`` in a child process (``treadle.server.process.ServerProcess``) whose
    port cannot be taken by an unrelated connection before the server binds it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Two workers unless a test asks: the front-and-workers path is what the default uses,
        # and the default's count (``limits.default_workers``) would start a worker's imports
        # (~1 s of CPU) more per core for each of the suite's servers.
        kwargs.setdefault("workers", TEST_SERVER_WORKERS)
        super().__init__(*args, **kwargs)
        self.port = unassigned_port()

    def start(self) -> ServerProcess:
        for attempt in range(3):
            try:
                super().start()
                return self
            except RuntimeError:
                process = self.process
                lost_port = process is not None and process.poll() is not None
                if attempt == 2 or not lost_port or _bindable(self.port):
                    raise  # not a port another process took: the server's own failure
                self.port = unassigned_port()
        raise AssertionError("unreachable")


__all__ = ["ServerProcess", "free_port", "unassigned_port"]
