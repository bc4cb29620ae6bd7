"""One persistent interactive bash on a pseudo-terminal: commands run in the same shell, so the
working directory and environment persist; a command that times out is interrupted, then killed.

How it works. bash runs with job control on a pty it owns as controlling terminal, so each command
is a foreground process group: Ctrl-C written to the pty interrupts exactly that command, and
``tcgetpgrp`` names the group to SIGKILL if it ignores the interrupt. A command is written to a
private file and ``source``d (so multi-line scripts and long lines work, with stdin from /dev/null so
it cannot swallow the next command); bash's PROMPT_COMMAND then prints a marker carrying a fresh
random nonce, the exit code and the working directory. Output before the marker is the command's.

Limits: ``close`` (and interpreter exit) hangs up the terminal, which ends bash and its jobs. If
the Python process is killed outright mid-command, the hangup still ends bash and that command,
but background jobs it started with ``&`` can survive as orphans.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from treadle.errors import TreadleError

DEFAULT_MAX_OUTPUT_BYTES = 30_000
"""Output kept per command (head and tail halves); the model's context is the scarce resource."""

STARTUP_TIMEOUT = 10.0
INTERRUPT_GRACE = 1.0
"""How long a command gets to stop after Ctrl-C, then after SIGKILL, before the shell is dropped."""

INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TMPDIR")
"""All a shell takes from this process's environment: never its keys (TREADLE_API_KEY,
TREADLE_API_KEYS, a provider's key); anything else a tool needs is passed explicitly."""

_MARKER_SLACK = 512
"""Bytes kept beyond the tail limit so a marker split across reads is still found whole."""

# Runs in the child between fork and exec: take the pty as controlling terminal (Popen has no
# option for it, and preexec_fn is unsafe with threads), then become bash.
_LAUNCHER = (
    "import fcntl, os, sys, termios\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)

_BASH_FLAGS = ("--noprofile", "--norc", "--noediting", "-i")
"""Interactive for job control and PROMPT_COMMAND; no rc files (the user's prompt, aliases);
no readline (it would print terminal escape codes)."""

# The marker function reads $? before anything can change it; PS1 and PS2 are emptied on every
# prompt because scripts such as a venv's activate prepend to PS1, which would leak into output.
_INIT = (
    "stty -echo -onlcr; set +H; unset HISTFILE PS0; "
    "__treadle_mark() { local __treadle_rc=$?; "
    'printf \'\\n__TREADLE_%s__ %s %s\\n\' "$__treadle_nonce" "$__treadle_rc" "$PWD"; '
    "PS1=''; PS2=''; }; PROMPT_COMMAND=__treadle_mark"
)


class BashSessionError(TreadleError):
    """The shell could not be started or stopped responding to its own protocol."""


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """What one command did. Its output is ``head`` alone, or ``head`` and ``tail`` around
    ``truncated_bytes`` cut from the middle. ``exit_code`` and ``cwd`` are None when the shell
    did not report them (it exited, or had to be killed); ``shell_alive`` False means the next
    command needs a new session."""

    head: str
    tail: str
    exit_code: int | None
    cwd: str | None
    timed_out: bool
    truncated_bytes: int
    total_bytes: int
    shell_alive: bool

    @property
    def output(self) -> str:
        """The output as the model reads it, with a note where bytes were cut."""
        if not self.truncated_bytes:
            return self.head
        return self.head + truncation_note(self.truncated_bytes, self.total_bytes) + self.tail


class _BoundedOutput:
    """Collects a command's output keeping only the first ``head`` and last ``tail`` bytes, so a
    command printing gigabytes costs bounded memory; counts what it drops."""

    def __init__(self, head: int, tail: int) -> None:
        self._head_limit = head
        self._tail_limit = tail
        self._head = bytearray()
        self._buffer = bytearray()  # everything until compacted, then the tail
        self._compacted = False
        self._dropped = 0
        self._scan_from = 0

    def feed(self, data: bytes) -> None:
        self._buffer += data
        limit = self._head_limit + self._tail_limit + _MARKER_SLACK
        if not self._compacted and len(self._buffer) > limit:
            self._head = self._buffer[: self._head_limit]
            del self._buffer[: self._head_limit]
            self._scan_from = max(0, self._scan_from - self._head_limit)
            self._compacted = True
        if self._compacted:
            excess = len(self._buffer) - (self._tail_limit + _MARKER_SLACK)
            if excess > 0:
                del self._buffer[:excess]
                self._dropped += excess
                self._scan_from = max(0, self._scan_from - excess)

    def find(self, pattern: re.Pattern[bytes]) -> re.Match[bytes] | None:
        """The marker in the newest bytes; each byte is scanned about once."""
        match = pattern.search(self._buffer, max(0, self._scan_from - _MARKER_SLACK))
        self._scan_from = len(self._buffer)
        return match

    def body(self, end: int | None = None) -> tuple[bytes, bytes, int]:
        """(head, tail, bytes cut between them) of the output up to ``end`` in the buffer."""
        rest = bytes(self._buffer[:end])
        if not self._compacted:
            if len(rest) <= self._head_limit + self._tail_limit:
                return rest, b"", 0
            cut = len(rest) - self._head_limit - self._tail_limit
            return rest[: self._head_limit], rest[-self._tail_limit :], cut
        kept = rest[-self._tail_limit :] if self._tail_limit else b""
        return bytes(self._head), kept, self._dropped + len(rest) - len(kept)


def truncation_note(cut: int, total: int) -> str:
    return (
        f"\n[... {cut} bytes of output cut here ({total} bytes in all); to see them, redirect "
        "the output to a file and read parts of it with head, tail, grep or sed -n ...]\n"
    )


class BashSession:
    """A live bash in ``cwd`` with ``env``. Not thread-safe: callers serialize ``run``."""

    def __init__(
        self,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        bash = shutil.which("bash")
        if bash is None:
            raise BashSessionError("bash was not found on PATH: install bash to use the terminal")
        self._max_output = max_output_bytes
        self._exported: dict[str, str] = {}
        self._tmpdir = Path(tempfile.mkdtemp(prefix="treadle-terminal-"))
        self._script = self._tmpdir / "command.sh"
        master, slave = os.openpty()
        # A wide terminal, so tools that format to the width do not wrap lines.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
        child_env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
        child_env.update(env or {})
        child_env.update(
            TERM="dumb", PAGER="cat", GIT_PAGER="cat", MANPAGER="cat", HISTFILE="/dev/null"
        )
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _LAUNCHER, bash, *_BASH_FLAGS],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=cwd,
                env=child_env,
                start_new_session=True,
            )
        except OSError as error:
            os.close(master)
            os.close(slave)
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            raise BashSessionError(f"could not start bash in {cwd}: {error}") from error
        os.close(slave)
        self._fd = master
        self._alive = True
        self._finalizer = weakref.finalize(self, _terminate, self._process, master, self._tmpdir)
        try:
            # If this process dies without closing us (SIGKILL), the hung-up shell exits and
            # removes its own temp folder.
            remove = f"rm -rf -- {shlex.quote(str(self._tmpdir))}"
            cleanup = f"trap {shlex.quote(remove)} EXIT"
            self._sync([_INIT, cleanup], STARTUP_TIMEOUT)
        except BashSessionError:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._alive and self._process.poll() is None

    def export(self, variables: Mapping[str, str]) -> None:
        """Make the shell's exported variables match ``variables`` for the names it manages
        (set new or changed ones, unset removed ones). Echo is off: values are not printed."""
        wanted = dict(variables)
        if wanted == self._exported:
            return
        lines = [f"unset {name}" for name in self._exported if name not in wanted]
        lines += [
            f"export {name}={shlex.quote(value)}"
            for name, value in wanted.items()
            if self._exported.get(name) != value
        ]
        self._sync(lines, STARTUP_TIMEOUT)
        self._exported = wanted

    def run(self, command: str, timeout: float) -> CommandOutcome:
        """Run ``command`` (any bash, several lines allowed) and return its merged output."""
        if not self.alive:
            raise BashSessionError("the shell has exited: start a new session")
        early = self._drain()
        self._script.write_text(command if command.endswith("\n") else command + "\n")
        nonce = secrets.token_hex(8)
        marker = re.compile(rb"\n__TREADLE_" + nonce.encode() + rb"__ (\d+) ([^\n]*)\n")
        output = _BoundedOutput(self._max_output // 2, self._max_output - self._max_output // 2)
        if early:
            output.feed(early)
        self._write(
            f"__treadle_nonce={nonce}; source {shlex.quote(str(self._script))} </dev/null\n"
        )
        match = self._read_until(marker, output, time.monotonic() + timeout)
        timed_out = match is None and self.alive
        if timed_out:
            match = self._interrupt(marker, output)
        if match is None:
            head, tail, cut = output.body()
            self.close()  # waits for bash, so its exit status is known below
            return CommandOutcome(
                head=_decode(head),
                tail=_decode(tail),
                exit_code=None if timed_out else self._process.returncode,
                cwd=None,
                timed_out=timed_out,
                truncated_bytes=cut,
                total_bytes=len(head) + cut + len(tail),
                shell_alive=False,
            )
        head, tail, cut = output.body(match.start())
        return CommandOutcome(
            head=_decode(head),
            tail=_decode(tail),
            exit_code=int(match.group(1)),
            cwd=match.group(2).decode("utf-8", "replace"),
            timed_out=timed_out,
            truncated_bytes=cut,
            total_bytes=len(head) + cut + len(tail),
            shell_alive=True,
        )

    def close(self) -> None:
        """Hang up the terminal (bash passes SIGHUP to its jobs), then kill what remains."""
        self._alive = False
        self._finalizer()

    def _interrupt(
        self, marker: re.Pattern[bytes], output: _BoundedOutput
    ) -> re.Match[bytes] | None:
        # Ctrl-C first: bash then abandons the rest of the command line (a loop stops too).
        self._write("\x03")
        match = self._read_until(marker, output, time.monotonic() + INTERRUPT_GRACE)
        if match is not None or not self.alive:
            return match
        with contextlib.suppress(OSError):
            group = os.tcgetpgrp(self._fd)
            if group != self._process.pid:
                os.killpg(group, signal.SIGKILL)
        return self._read_until(marker, output, time.monotonic() + INTERRUPT_GRACE)

    def _sync(self, lines: list[str], timeout: float) -> None:
        """Run internal lines and wait until bash has processed them; their output is dropped."""
        nonce = secrets.token_hex(8)
        for line in lines:
            self._write(line + "\n")
        self._write(f"__treadle_nonce={nonce}\n")
        marker = re.compile(rb"\n__TREADLE_" + nonce.encode() + rb"__ (\d+) ([^\n]*)\n")
        sink = _BoundedOutput(0, 0)
        if self._read_until(marker, sink, time.monotonic() + timeout) is None:
            raise BashSessionError(
                f"bash did not answer within {timeout:g} s (it may have exited or hung)"
            )

    def _write(self, text: str) -> None:
        data = text.encode()
        while data:
            try:
                written = os.write(self._fd, data)
            except OSError as error:
                self._alive = False
                raise BashSessionError(f"cannot write to the shell: {error}") from error
            data = data[written:]

    def _read_until(
        self, marker: re.Pattern[bytes], output: _BoundedOutput, deadline: float
    ) -> re.Match[bytes] | None:
        while True:
            match = output.find(marker)
            if match is not None:
                return match
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._alive:
                return None
            if not _readable(self._fd, remaining):
                continue
            data = self._read_available()
            if data is None:
                return None
            output.feed(data)

    def _read_available(self) -> bytes | None:
        """One read; None when the shell side is gone (EIO on Linux once bash exits)."""
        try:
            data = os.read(self._fd, 65536)
        except OSError as error:
            if error.errno not in (errno.EIO, errno.EBADF):
                raise
            data = b""
        if not data:
            self._alive = False
            return None
        return data

    def _drain(self) -> bytes:
        """Output that arrived between commands (a background job's, job notices)."""
        collected = bytearray()
        while len(collected) < self._max_output:
            if not _readable(self._fd, 0):
                break
            data = self._read_available()
            if data is None:
                break
            collected += data
        return bytes(collected)


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` has output (or has hung up) within ``timeout`` seconds. ``poll``, not
    ``select``: select fails for fds numbered past 1024, which a busy server reaches."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(math.ceil(max(timeout, 0.0) * 1000)))


def _decode(data: bytes) -> str:
    # The newline the marker printed before itself is part of the marker pattern, so the
    # command's own output (last newline included) is kept exactly.
    return data.decode("utf-8", "replace")


def _terminate(process: subprocess.Popen[bytes], fd: int, tmpdir: Path) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
    try:
        process.wait(timeout=INTERRUPT_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=INTERRUPT_GRACE)
    shutil.rmtree(tmpdir, ignore_errors=True)
