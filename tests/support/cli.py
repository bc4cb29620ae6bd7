"""Running the real ``treadle`` command line as a user does, in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


def run_treadle(
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    columns: int | None = None,
    drop: tuple[str, ...] = ("TREADLE_STORE",),
) -> subprocess.CompletedProcess[str]:
    """``python -m treadle ARGS``: the caller's ``drop`` variables removed (each test names its
    store), ``env`` added, rich's width set to ``columns`` when given; with no ``stdin`` the
    child's standard input is closed, so nothing can wait on it."""
    child_env = {name: value for name, value in os.environ.items() if name not in drop}
    child_env.update(env or {})
    if columns is not None:
        child_env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "treadle", *args],
        capture_output=True,
        text=True,
        check=False,
        env=child_env,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )
