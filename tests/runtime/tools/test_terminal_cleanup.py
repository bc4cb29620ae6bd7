"""The terminal's temp folder (``treadle-terminal-*``) goes with its shell: on close, and when
the process that owned the shell is killed without closing it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from treadle.runtime.tools.bash_session import BashSession

OWNER = """
import sys, time
from pathlib import Path
from treadle.runtime.tools.bash_session import BashSession
session = BashSession(Path(sys.argv[1]))
print(session._tmpdir, flush=True)
time.sleep(60)
"""


def wait_gone(path: Path, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while path.exists():
        assert time.monotonic() < deadline, f"{path} is still there"
        time.sleep(0.05)


def test_close_removes_the_temp_folder(tmp_path):
    session = BashSession(tmp_path)
    folder = session._tmpdir
    assert folder.name.startswith("treadle-terminal-")
    assert folder.is_dir()
    session.close()
    assert not folder.exists()


def test_a_killed_owner_leaves_no_temp_folder(tmp_path):
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        folder = Path(owner.stdout.readline().strip())
        assert folder.is_dir()
    finally:
        owner.kill()  # SIGKILL: no close, no finalizer
        owner.wait(timeout=10)
        owner.stdout.close()
    wait_gone(folder)  # the hung-up shell removed it on its way out
