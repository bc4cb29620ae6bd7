"""Test-wide settings: a Hypothesis profile for CI with no deadline (the machine is shared), a
data folder of the test process's own, so that nothing a test starts (a server's snapshots of a
PostgreSQL store, a default store) writes into the user's ``~/.local/share/treadle``, and the
``browser`` mark on the Canvas's tests (``make test-fast`` leaves them out).

The suite runs in parallel (``make test``: pytest-xdist, one process per core): each worker
process imports this file, so each has its own data folder; whatever a test counts on the host
(processes, folders, connections) it finds by a marker of its own (tests/support/processes.py).
"""

import atexit
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Derandomized: the suite draws the same examples every run, so it passes or fails by the
# code, not by the draw (``make soak`` draws new sequences of the state machine).
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=200,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=100, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

_DATA_HOME = tempfile.mkdtemp(prefix="treadle-test-data-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME  # inherited by every child process a test starts
atexit.register(shutil.rmtree, _DATA_HOME, ignore_errors=True)

# Ctrl-C as in a terminal, even when the suite was started in the background of a script
# (`make test &`, a CI runner): such a shell starts its jobs with SIGINT ignored, and an ignored
# signal is inherited, so the tests' Ctrl-C would reach neither this process nor the commands
# it starts (a Ctrl-C'd `sleep` would live on until killed).
if (
    threading.current_thread() is threading.main_thread()
    and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
):
    signal.signal(signal.SIGINT, signal.default_int_handler)

_WEB = Path(__file__).parent / "web"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _WEB in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture
def nowhere_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses every connection for the test's duration: bound and
    never listened on, so no server of a test running beside this one can take it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]
