"""Running one hook command: where (the conversation's workspace, in its sandbox if it has one),
with what (the event as JSON on stdin), for how long (its timeout), and what is left after.

The command runs as ``/bin/sh -c COMMAND`` in a session of its own, in the workspace folder,
with the shell environment the workspace gives its terminal (never this process's keys) plus
``CLAUDE_PROJECT_DIR``. Its input and output go through unnamed temporary files, so a hook that
never reads its input, or a child that keeps a pipe open, cannot make the run wait. When the
command ends or its timeout expires, every process it started is killed (``process_tree``; a
sandbox's own process namespace and cgroup go with it): nothing of a hook outlives its run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from treadle.data.hooks import HookCommand
from treadle.errors import TreadleError
from treadle.runtime.tools.process_tree import Mark, kill_started_since, mark
from treadle.runtime.workspace.base import Workspace
from treadle.runtime.workspace.sandbox import SYSTEM_DIRS, SandboxedWorkspace
from treadle.runtime.workspace.shell import PidsCgroup, ShellCommand, launch_argv

MAX_OUTPUT_BYTES = 64 * 1024
"""What is read of a hook's stdout and of its stderr (the rest is dropped, and said so)."""
PROJECT_DIR_VARIABLE = "CLAUDE_PROJECT_DIR"
"""Claude Code's variable naming the project folder: hooks written for it find the workspace."""
UNCOUNTED_PROCESSES = 4_194_304
"""The pids limit of an unsandboxed hook's cgroup: Linux's largest pid, so no limit at all."""
INTERRUPT_POLL_S = 0.1
"""How often a running hook looks whether the user interrupted the run."""
KILL_ROUNDS = 20
"""How many times the tree is looked for and killed (a process may fork between two looks)."""


@dataclass(frozen=True, slots=True)
class HookRun:
    """What one hook command did: its exit code (None when it timed out or did not start),
    what it printed (each at most ``MAX_OUTPUT_BYTES``), how long it took, and, when it
    failed to run to an exit, why (``failure``)."""

    exit_code: int | None
    stdout: str
    stderr: str
    seconds: float
    failure: str | None = None


def run_hook(
    hook: HookCommand,
    payload: dict[str, Any],
    workspace: Workspace,
    *,
    mount_files: bool,
    interruption: threading.Event | None = None,
) -> HookRun:
    """Run ``hook`` with ``payload`` on stdin in ``workspace`` (in its sandbox when it has one;
    ``mount_files``: the absolute file paths the command names are shown read-only inside,
    for hooks the user or the operator gave, never for a client's or the workspace's own).
    ``interruption`` set (the user interrupted the run) stops it as a timeout does."""
    started = time.monotonic()
    with (
        contextlib.ExitStack() as stack,
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
    ):
        # A sandbox shows its shell a private folder; an unsandboxed shell needs none.
        private = (
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="treadle-hook-")))
            if isinstance(workspace, SandboxedWorkspace)
            else workspace.root
        )
        stdin.write(json.dumps(payload).encode())
        stdin.seek(0)
        shell = None
        try:
            shell = _shell(hook.command, workspace, private, mount_files)
            since = mark()
            process = subprocess.Popen(
                launch_argv(shell, controlling_terminal=False),
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env=dict(shell.env),
                cwd=workspace.root,
                start_new_session=True,
                close_fds=True,
            )
        except (OSError, TreadleError) as error:
            if shell is not None and shell.cgroup is not None:
                shell.cgroup.kill()
            return HookRun(None, "", "", time.monotonic() - started, f"could not start: {error}")
        try:
            code, failure = _wait(process, hook.timeout, interruption)
        finally:
            _end(process, since, shell)
        seconds = time.monotonic() - started
        if code is not None and code < 0:
            failure = f"was killed by signal {signal.Signals(-code).name}"
        return HookRun(code, _read(stdout), _read(stderr), seconds, failure)


def _wait(
    process: subprocess.Popen[bytes], timeout: float, interruption: threading.Event | None
) -> tuple[int | None, str | None]:
    """The hook's exit code, or None and why it was stopped before it exited. Its exit is
    seen at once through a pidfd (``Popen.wait`` with a timeout polls, up to 50 ms late)."""
    deadline = time.monotonic() + timeout
    try:
        pidfd: int | None = os.pidfd_open(process.pid)
    except OSError:  # an old kernel: polled
        pidfd = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, f"timed out after {timeout:g} s (it was killed)"
            if interruption is not None and interruption.is_set():
                return None, "was stopped: the user interrupted the run"
            slice_s = min(left, INTERRUPT_POLL_S)
            if pidfd is not None:
                if select.select([pidfd], [], [], slice_s)[0]:
                    return process.wait(), None
                continue
            try:
                return process.wait(timeout=slice_s), None
            except subprocess.TimeoutExpired:
                continue
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _end(process: subprocess.Popen[bytes], since: Mark, shell: ShellCommand) -> None:
    """Kill whatever the hook started (its background jobs too), then the hook itself. Its
    cgroup, when it has one, holds every process it made: emptying it is exact and cheaper
    than a look through /proc."""
    if shell.cgroup is None:
        for _ in range(KILL_ROUNDS):
            if not kill_started_since([process.pid], since):
                break
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()
    if shell.cgroup is not None:
        shell.cgroup.kill()


def _read(file: IO[bytes]) -> str:
    file.seek(0)
    data = file.read(MAX_OUTPUT_BYTES + 1)
    text = data[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
    return text + "\n[output cut]" if len(data) > MAX_OUTPUT_BYTES else text


def _shell(command: str, workspace: Workspace, private: Path, mount_files: bool) -> ShellCommand:
    argv = ["/bin/sh", "-c", command]
    if isinstance(workspace, SandboxedWorkspace):
        extra = _named_files(command, workspace.root) if mount_files else ()
        sandbox = workspace.sandbox
        if extra:
            mounts = (*sandbox.mounts_ro, *(m for m in extra if m not in sandbox.mounts_ro))
            workspace = SandboxedWorkspace(
                workspace.root,
                sandbox.model_copy(update={"mounts_ro": mounts}),
                user=workspace.user,
            )
    shell = workspace.shell_command(argv, private)
    env = dict(shell.env)
    env[PROJECT_DIR_VARIABLE] = str(workspace.root)
    cgroup = shell.cgroup
    if cgroup is None and not shell.sandboxed:
        # A cgroup of its own, when this process can make one, finds even a process that left
        # the hook's session and was reparented (a double fork); a sandbox's namespace does.
        cgroup = PidsCgroup.create(UNCOUNTED_PROCESSES)
    return dataclasses.replace(shell, env=env, cgroup=cgroup)


def _named_files(command: str, root: Path) -> tuple[str, ...]:
    """The absolute paths of existing files ``command`` names (``$CLAUDE_PROJECT_DIR``
    expanded) that a sandbox would not show: the hook's script, typically."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: the shell will say so
        return ()
    found: list[str] = []
    for word in words:
        for variable in (f"${{{PROJECT_DIR_VARIABLE}}}", f"${PROJECT_DIR_VARIABLE}"):
            word = word.replace(variable, str(root))
        path = Path(word)
        if not path.is_absolute() or not os.path.isfile(path):
            continue
        real = Path(os.path.realpath(path))
        if real.is_relative_to(root) or any(real.is_relative_to(d) for d in SYSTEM_DIRS):
            continue  # shown already
        found.append(word)
    return tuple(found)
