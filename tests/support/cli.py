"""Running the real ``treadle`` command line: in a child process, as a user does
(``run_treadle``), or in this process (``invoke_treadle``), for tests about what a command
prints and stores rather than about the process (its start-up, signals, terminal, exit by
signal): the same arguments, environment and results, without ~1 s of start-up each."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping

from typer.testing import CliRunner


def _child_environment(
    env: Mapping[str, str] | None, columns: int | None, drop: tuple[str, ...]
) -> dict[str, str]:
    child_env = {name: value for name, value in os.environ.items() if name not in drop}
    child_env.update(env or {})
    if columns is not None:
        child_env["COLUMNS"] = str(columns)
    return child_env


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
    return subprocess.run(
        [sys.executable, "-m", "treadle", *args],
        capture_output=True,
        text=True,
        check=False,
        env=_child_environment(env, columns, drop),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        timeout=600,
    )


def invoke_treadle(
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    columns: int | None = None,
    drop: tuple[str, ...] = ("TREADLE_STORE",),
) -> subprocess.CompletedProcess[str]:
    """``treadle ARGS`` run in this process, with what ``run_treadle`` gives the child: the
    environment (for the call only), standard input (empty without ``stdin``), and the exit
    code, stdout and stderr. An exception that escapes the command is written to stderr as
    a traceback with exit code 1, as the process would (tests assert there is none)."""
    from treadle.cli import app

    wanted = _child_environment(env, columns, drop)
    changes: dict[str, str | None] = {name: None for name in os.environ if name not in wanted}
    changes.update({name: value for name, value in wanted.items() if os.environ.get(name) != value})
    result = CliRunner(env=changes).invoke(
        app, list(args), input=stdin or "", catch_exceptions=True
    )
    stderr = result.stderr
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
        code = 1
    return subprocess.CompletedProcess(
        ["treadle", *args], code, stdout=result.stdout, stderr=stderr
    )


def run_in_pty(
    args: list[str],
    answer: bytes = b"y\n",
    timeout_s: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """``python -m treadle ARGS`` on a pty, answering every "[y/n]" prompt with ``answer``;
    its exit code and everything it printed (``env`` added to the environment)."""
    leader, follower = pty.openpty()
    child_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    if "TREADLE_STORE" not in (env or {}):
        child_env.pop("TREADLE_STORE", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "treadle", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=child_env,
        close_fds=True,
    )
    os.close(follower)
    seen = b""
    answered = 0
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the child closed the pty: it ended
                    break
                if not chunk:
                    break
                seen += chunk
                if seen.count(b"[y/n]") > answered:
                    answered += 1
                    os.write(leader, answer)
            elif process.poll() is not None:
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    return code, seen.decode(errors="replace")


_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def without_escapes(text: str) -> str:
    """What a terminal showed, its CSI sequences (colours, cursor moves) taken out."""
    return _CSI.sub("", text)
