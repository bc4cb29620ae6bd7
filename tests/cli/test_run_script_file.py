"""``treadle run --script`` reads only a regular file under the size limit (issue 10, item 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
def test_a_script_that_is_not_a_regular_file_is_bad_input(tmp_path: Path, kind: str) -> None:
    script = {"device": Path("/dev/zero"), "fifo": tmp_path / "fifo", "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(script)
    command = ["run", "x", "--create-workspace", "--workspace", str(tmp_path / "ws")]
    command += ["--script", str(script)]
    result = subprocess.run(
        [sys.executable, "-m", "treadle", *command, "--store", f"sqlite:///{tmp_path / 'run.db'}"],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "not a regular file" in result.stderr
    assert "Traceback" not in result.stderr
