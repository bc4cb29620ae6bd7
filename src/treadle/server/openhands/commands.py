"""Workspace commands started through ``/openhands/api/bash``: each runs once, in the sandbox of
the conversation whose workspace holds its working directory, with that conversation's
secrets masked in its output; this process keeps the last ``MAX_COMMANDS`` of them (memory
only: not part of any conversation's log).

A command gets a fresh private folder (removed after), its own process group (killed with it
at its timeout) and at most ``MAX_OUTPUT_BYTES`` of each stream kept (the rest is read and
dropped, so a chatty command never fills the server's memory nor blocks on a full pipe).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from treadle.data.ids import new_id
from treadle.events.model import utc_now_iso
from treadle.runtime.workspace.base import Workspace
from treadle.runtime.workspace.shell import launch_argv

MAX_COMMANDS = 64
MAX_OUTPUT_BYTES = 1024 * 1024
MAX_TIMEOUT_S = 3600
RUNNING_AT_ONCE = 8
"""Commands running at once in this process; more are refused (429) until one ends."""
_SCRIPT = 'cd -- "$1" || exit 1; eval "$2"'
"""``bash -c`` script: go to the working directory, then run the command as bash would."""


class TooManyCommands(Exception):
    pass


@dataclass
class Command:
    id: str
    command: str
    cwd: str
    timeout: int
    timestamp: str = field(default_factory=utc_now_iso)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[bytes] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "timestamp": self.timestamp,
            "command": self.command,
            "cwd": self.cwd,
            "timeout": self.timeout,
            "kind": "BashCommand",
        }


def _drain(stream: IO[bytes], kept: bytearray) -> None:
    while chunk := stream.read(65536):
        room = MAX_OUTPUT_BYTES - len(kept)
        if room > 0:
            kept += chunk[:room]


class Commands:
    def __init__(self) -> None:
        self._commands: OrderedDict[str, Command] = OrderedDict()
        self._lock = threading.Lock()
        self._running = 0

    def start(
        self,
        command: str,
        cwd: Path,
        timeout: int,
        workspace: Workspace,
        mask: Callable[[str], str],
    ) -> Command:
        with self._lock:
            if self._running >= RUNNING_AT_ONCE:
                raise TooManyCommands(
                    f"{RUNNING_AT_ONCE} workspace commands already run here; retry when one ends"
                )
            self._running += 1
            record = Command(new_id(), command, str(cwd), timeout)  # routed back here
            self._commands[record.id] = record
            while len(self._commands) > MAX_COMMANDS:
                self._commands.popitem(last=False)
        thread = threading.Thread(
            target=self._run, args=(record, workspace, mask), name="treadle-oh-bash", daemon=True
        )
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._running -= 1
            raise
        return record

    def _run(self, record: Command, workspace: Workspace, mask: Callable[[str], str]) -> None:
        private = Path(tempfile.mkdtemp(prefix="treadle-oh-bash-"))
        stdout, stderr = bytearray(), bytearray()
        exit_code = -1
        shell = None
        try:
            shell = workspace.shell_command(
                ["/bin/bash", "-c", _SCRIPT, "treadle-command", record.cwd, record.command],
                private,
            )
            process = subprocess.Popen(
                launch_argv(shell, controlling_terminal=False),
                env=dict(shell.env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                cwd=str(workspace.root),
            )
            record.process = process
            assert process.stdout is not None
            assert process.stderr is not None
            readers = [
                threading.Thread(target=_drain, args=(process.stdout, stdout), daemon=True),
                threading.Thread(target=_drain, args=(process.stderr, stderr), daemon=True),
            ]
            for reader in readers:
                reader.start()
            try:
                exit_code = process.wait(timeout=record.timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                stderr += f"\ncommand timed out after {record.timeout} seconds".encode()
                exit_code = -1
            for reader in readers:
                reader.join(timeout=10)
        except Exception as error:  # a sandbox that cannot start, a cgroup not made
            stderr += f"the command could not be started: {error}".encode()
        finally:
            if shell is not None and shell.cgroup is not None:
                with contextlib.suppress(Exception):
                    shell.cgroup.kill()
            shutil.rmtree(private, ignore_errors=True)
            record.outputs.append(
                {
                    "id": str(uuid.uuid4()),
                    "timestamp": utc_now_iso(),
                    "command_id": record.id,
                    "order": 0,
                    "exit_code": exit_code,
                    "stdout": mask(stdout.decode("utf-8", errors="replace")),
                    "stderr": mask(stderr.decode("utf-8", errors="replace")),
                    "kind": "BashOutput",
                }
            )
            record.done.set()
            with self._lock:
                self._running -= 1

    def get(self, command_id: str) -> Command | None:
        with self._lock:
            return self._commands.get(command_id)

    def events(self) -> list[dict[str, Any]]:
        """The commands' events (each command's record, then its output), oldest command
        first: what ``bash_events.BashEventsQuery.page`` filters and pages."""
        with self._lock:
            records = list(self._commands.values())
        found: list[dict[str, Any]] = []
        for record in records:
            found.append(record.as_json())
            found += list(record.outputs)
        return found

    def stop(self, command_id: str) -> bool:
        record = self.get(command_id)
        if record is None:
            return False
        if record.process is not None and record.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.process.pid, signal.SIGKILL)
        return True

    def close(self) -> None:
        """Kill what still runs (the server stops)."""
        with self._lock:
            records = list(self._commands.values())
        for record in records:
            self.stop(record.id)
