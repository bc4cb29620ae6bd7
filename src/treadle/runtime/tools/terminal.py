"""The ``terminal`` tool: bash commands in a persistent session per conversation and workspace,
with a per-command timeout, the exit code in ``data.exit_code`` and long output truncated."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pydantic import Field, field_validator

from treadle.runtime.secrets import Secrets
from treadle.runtime.tools.base import Tool, ToolArguments, ToolContext, ToolResult
from treadle.runtime.tools.bash_session import (
    DEFAULT_MAX_OUTPUT_BYTES,
    BashSession,
    CommandOutcome,
    truncation_note,
)

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 3600.0

_DESCRIPTION = """\
Run a bash command in a persistent shell that starts in the workspace folder.
* The shell persists between calls: `cd`, exported variables, functions and activated virtualenvs stay.
* stdout and stderr are merged. stdin is /dev/null: interactive programs get end-of-file, so pass \
flags such as `-y` / `--yes` and avoid pagers and editors.
* `timeout` (seconds) limits one command; when it expires the command is interrupted (Ctrl-C, then \
killed) and the shell stays usable. Start long-running servers in the background with output to a \
file: `cmd > server.log 2>&1 &`.
* Long output keeps its beginning and end with a note saying how many bytes were cut; redirect it \
to a file and use head, tail or grep to read it.
* Several lines form one script; the exit code of the last command is reported.
* `reset: true` kills the shell and starts a new one in the workspace folder before running the command.
* Where the shell runs depends on the conversation: in a sandbox (only the workspace is writable, \
HOME and /tmp are private and empty, and the network is usually off) or on the user's machine."""


class TerminalArguments(ToolArguments):
    command: str = Field(description="The bash command(s) to run; several lines are allowed.")
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT,
        description=f"Seconds before the command is interrupted (default {DEFAULT_TIMEOUT:g}).",
    )
    reset: bool = Field(
        default=False,
        description="Start a fresh shell (workspace folder, clean environment) before the command.",
    )

    @field_validator("command")
    @classmethod
    def _command_is_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the command is empty: give a bash command to run")
        return value


@dataclass
class _Slot:
    """One conversation's shell; the lock makes its commands run one at a time."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    session: BashSession | None = None


class TerminalTool(Tool[TerminalArguments]):
    name = "terminal"
    description = _DESCRIPTION
    arguments_model = TerminalArguments
    parallel_safe = False  # one shell: commands of one batch would share its cwd and output

    def __init__(
        self,
        *,
        default_timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        self.default_timeout = default_timeout
        self.max_output_bytes = max_output_bytes
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._lock = threading.Lock()

    def risky(self, arguments: TerminalArguments) -> bool:
        return True  # arbitrary commands (with the user's rights when not sandboxed)

    def run(self, arguments: TerminalArguments, context: ToolContext) -> ToolResult:
        key = (context.conversation_id, str(context.workspace.root))
        with self._lock:
            slot = self._slots.setdefault(key, _Slot())
        with slot.lock:
            notes: list[str] = []
            if arguments.reset and slot.session is not None:
                slot.session.close()
                slot.session = None
                notes.append("[the shell was reset: new session in the workspace folder]")
            elif slot.session is not None and not slot.session.alive:
                slot.session = None
                notes.append(
                    "[the previous shell had exited: a new one was started in the workspace "
                    "folder, so earlier cd and exported variables are gone]"
                )
            if slot.session is None:
                # resolve("."): the folder is checked again (it may have become a symlink that
                # leads out of the workspace root since it was opened).
                slot.session = BashSession(
                    context.workspace.resolve("."),
                    max_output_bytes=self.max_output_bytes,
                    start=context.workspace.shell_command,
                )
            slot.session.export(context.secrets.env())
            timeout = arguments.timeout or self.default_timeout
            live = context.open_live_output()  # what it prints so far, told as it comes
            try:
                outcome = slot.session.run(arguments.command, timeout, context.interruption, live)
            finally:
                if live is not None:
                    live.close()
            if not outcome.shell_alive:
                slot.session = None
        return _result(outcome, timeout, notes, context.secrets)

    def interrupt(self, context: ToolContext) -> None:
        """Stop the conversation's running command now (``context.interruption`` is set): the
        session kills what it started; the shell stays unless it does not answer."""
        with self._lock:
            slot = self._slots.get((context.conversation_id, str(context.workspace.root)))
        # Not under slot.lock: the running call holds it. Reading the attribute is atomic, and
        # a session made after this look sees the event set before it runs anything.
        session = slot.session if slot is not None else None
        if session is not None:
            session.wake()

    def close(self) -> None:
        with self._lock:
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            with slot.lock:
                if slot.session is not None:
                    slot.session.close()
                    slot.session = None


def _result(
    outcome: CommandOutcome, timeout: float, notes: list[str], secrets: Secrets
) -> ToolResult:
    output = outcome.output
    if outcome.truncated_bytes:
        # The tool boundary masks whole secrets; only here is a secret split by the cut known.
        head, tail = secrets.mask_around_cut(outcome.head, outcome.tail)
        output = head + truncation_note(outcome.truncated_bytes, outcome.total_bytes) + tail
    lines = [*notes]
    if output:
        lines.append(output.removesuffix("\n"))
    if outcome.interrupted and outcome.shell_alive:
        lines.append(
            "[interrupted by the user: the command and the processes it started were killed; "
            f"the shell is still usable; cwd: {outcome.cwd}]"
        )
    elif outcome.interrupted:
        lines.append(
            "[interrupted by the user: the command and the processes it started were killed, "
            "and the shell did not answer, so it was killed too; the next command starts a new "
            "shell in the workspace folder]"
        )
    elif outcome.timed_out and outcome.shell_alive:
        lines.append(
            f"[timed out after {timeout:g} s: the command was interrupted "
            f"(exit code {outcome.exit_code}); the shell is still usable; cwd: {outcome.cwd}]"
        )
    elif outcome.timed_out:
        lines.append(
            f"[timed out after {timeout:g} s and the shell did not respond to Ctrl-C or SIGKILL "
            "of the command: it was killed; the next command starts a new shell in the "
            "workspace folder]"
        )
    elif not outcome.shell_alive:
        lines.append(
            f"[the shell exited with code {outcome.exit_code}; the next command starts a new "
            "shell in the workspace folder]"
        )
    else:
        lines.append(f"[exit code {outcome.exit_code}; cwd: {outcome.cwd}]")
    return ToolResult(
        content="\n".join(lines),
        is_error=outcome.timed_out or outcome.interrupted,
        data={
            "exit_code": outcome.exit_code,
            "cwd": outcome.cwd,
            "timed_out": outcome.timed_out,
            "truncated_bytes": outcome.truncated_bytes,
            "shell_ended": not outcome.shell_alive,
            "interrupted": outcome.interrupted,
        },
    )
