"""A task's own commands (``setup``, ``verify``): one bash command in the attempt's workspace,
under the same isolation as the agent's tools (docs/sandbox.md), with a time limit; what it
printed is kept as a bounded tail."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treadle.data.settings import SandboxSettings
from treadle.runtime.workspace.local import LocalWorkspace
from treadle.runtime.workspace.sandbox import SandboxedWorkspace
from treadle.runtime.workspace.shell import ShellCommand, launch_argv

OUTPUT_TAIL_CHARS = 4000
"""How much of a command's output the result keeps (its end: where test runners summarize)."""
TIMED_OUT_EXIT = 124
"""The exit code a command stopped by its time limit reports (as coreutils' timeout does)."""


@dataclass(frozen=True)
class CommandResult:
    """A command's exit code, the tail of its output (stdout and stderr merged) and its
    wall time in seconds."""

    exit_code: int
    output_tail: str
    seconds: float
    timed_out: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "output_tail": self.output_tail,
            "seconds": round(self.seconds, 3),
        }


def run_task_command(
    workspace: Path,
    command: str,
    sandbox: SandboxSettings,
    *,
    timeout_s: float,
    environment: Mapping[str, str] | None = None,
    tail_chars: int = OUTPUT_TAIL_CHARS,
) -> CommandResult:
    """Run ``command`` with bash in ``workspace`` under ``sandbox`` (``SandboxUnavailable``
    when bubblewrap cannot start here: never a silent fallback). Every process it started is
    gone when this returns (its process group, and the sandbox's cgroup when there is one)."""
    chosen: LocalWorkspace
    if sandbox.kind == "none":
        chosen = LocalWorkspace(workspace, environment=environment)
    else:
        chosen = SandboxedWorkspace(workspace, sandbox, environment=environment)
    with tempfile.TemporaryDirectory(prefix="treadle-eval-cmd-") as private:
        shell = chosen.shell_command(["/bin/bash", "-c", command], Path(private))
        try:
            return _run(shell, workspace, timeout_s, tail_chars)
        finally:
            if shell.cgroup is not None:
                shell.cgroup.kill()


def _run(shell: ShellCommand, workspace: Path, timeout_s: float, tail_chars: int) -> CommandResult:
    started = time.monotonic()
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            launch_argv(shell, controlling_terminal=False),
            cwd=workspace,
            env=dict(shell.env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = False
        try:
            exit_code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            exit_code = TIMED_OUT_EXIT
        finally:
            # The group too: background children of an unsandboxed command die with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        seconds = time.monotonic() - started
        size = output.tell()
        output.seek(max(0, size - tail_chars * 4))
        tail = output.read().decode("utf-8", "replace")[-tail_chars:]
    if timed_out:
        tail += f"\n[stopped after {timeout_s:g} s]"
    return CommandResult(exit_code, tail, seconds, timed_out)
