"""One persistent interactive bash on a pseudo-terminal: commands run in the same shell, so the
working directory and environment persist; a command that times out is interrupted, then killed.

How it works. bash runs with job control on a pty it owns as controlling terminal, so each command
is a foreground process group: Ctrl-C written to the pty interrupts exactly that command, and
``tcgetpgrp`` names the group to SIGKILL if it ignores the interrupt. A command is handed to
bash through a FIFO in the terminal's private folder, which bash ``source``s (so multi-line
scripts and long lines work, with stdin from /dev/null so it cannot swallow the next command; the
text passes through the kernel's pipe and never lies in a file); bash's PROMPT_COMMAND then
prints a marker carrying a fresh random nonce, the exit code and the working directory. Output
before the marker is the command's.

Where it runs is the workspace's choice (``Workspace.shell_command``): as is, or behind a sandbox
(bubblewrap), with the environment, resource limits and pids cgroup the workspace gives; the
session never reads this process's environment.

Interrupt (the user's, not a timeout): ``run`` is given a ``stop`` event; another thread sets it
and calls ``wake``. The running command is then stopped now: the shell gets SIGINT (bash abandons
the rest of the command line) and every process the command started (``process_tree``: its
children and the background jobs it started, not those of earlier commands) is killed, again
until the shell prints its marker; once the shell has reaped them, its notices of them
(``[1]+ Killed ...``) are kept with this command's output, never left for the next. The shell
survives, with its cwd and variables; if it does not answer within ``INTERRUPT_GRACE`` it is
killed, and the next command starts a new one. The same happens when an exception (Ctrl-C's
KeyboardInterrupt) unwinds out of ``run``.

Lifetime: the shell (and its sandbox) is forked by the process-wide spawner thread
(``workspace.spawner``), so it belongs to whoever holds the session, not to the thread that
first ran a command: on a server it lives from one run to the next. The private folder is
locked by this process while the shell lives (``terminal_folders``): after a kill, the next
process that opens a store removes it and the shell's cgroup.

Limits: ``close`` (and interpreter exit) hangs up the terminal, which ends bash and its jobs. If
the Python process is killed outright mid-command, the hangup still ends bash and that command;
unsandboxed, background jobs it started with ``&`` can survive as orphans, while in a sandbox
they die with its process namespace. A timed-out command's process group is killed (its
background children included) once the shell has its prompt back.
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
import stat
import struct
import subprocess
import termios
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from treadle.errors import TreadleError
from treadle.runtime.tools.process_tree import (
    Mark,
    children_started_since,
    kill_started_since,
    mark,
)
from treadle.runtime.tools.terminal_folders import COMMAND_FIFO, TerminalFolder
from treadle.runtime.workspace import spawner
from treadle.runtime.workspace.shell import (
    PidsCgroup,
    ShellCommand,
    launch_argv,
    unsandboxed_environment,
)

DEFAULT_MAX_OUTPUT_BYTES = 30_000
"""Output kept per command (head and tail halves); the model's context is the scarce resource."""

STARTUP_TIMEOUT = 10.0
INTERRUPT_GRACE = 1.0
"""How long a command gets to stop after Ctrl-C, then after SIGKILL, before the shell is dropped."""
_KILL_SWEEP_S = 0.05
"""While an interrupted command's shell has not printed its marker, how often what the command
started (or what bash started next, before it saw the SIGINT) is killed again."""
_REAP_POLL_S = 0.002
"""How often a stop looks whether the shell has reaped the jobs it killed."""
_NOTICES_LIMIT = 4096
"""At most this much of what the shell prints after a stopped command's marker (its notices of
the jobs the stop killed) is kept with that command's output."""

_HAND_OVER_POLL_S = 0.0005
"""How often the FIFO is tried while bash is about to open it (it takes well under 1 ms)."""

_MARKER_SLACK = 512
"""Bytes kept beyond the tail limit so a marker split across reads is still found whole."""

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


_ANY_MARKER = re.compile(rb"\n__TREADLE_[0-9a-f]{16}__ (\d+) ([^\n]*)\n")
"""A marker of any nonce: (exit code, cwd). One printed after its command was already answered
(an interrupt that raced the end of a command makes bash print a second prompt) is never part of
the next command's output."""


class _EndMarker:
    """The marker of one nonce, found with ``bytes.find`` and parsed by ``_ANY_MARKER``: a
    pattern compiled per nonce cost a regex compile (~0.3 ms) on every command."""

    __slots__ = ("_start",)

    def __init__(self, nonce: str) -> None:
        self._start = b"\n__TREADLE_" + nonce.encode() + b"__ "

    def search(self, buffer: bytes | bytearray, pos: int = 0) -> re.Match[bytes] | None:
        while (at := buffer.find(self._start, pos)) >= 0:
            match = _ANY_MARKER.match(buffer, at)
            if match is not None:
                return match
            pos = at + 1
        return None


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
    interrupted: bool = False
    """Stopped by ``run``'s ``stop`` event (the user), not by its timeout."""

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

    def find(self, pattern: _EndMarker) -> re.Match[bytes] | None:
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


class LiveSink(Protocol):
    """Where a command's output goes while it runs (``runtime.live_output.CallOutput``)."""

    def feed(self, data: bytes) -> None: ...

    def wait_s(self) -> float | None: ...

    def tick(self) -> None: ...


class _OutputSoFar:
    """Passes a command's output on as it is read, less what may be the start of the marker
    that ends it (a newline, then ``__TREADLE_<nonce>__``): only bytes that are certainly the
    command's own reach ``sink``."""

    def __init__(self, sink: LiveSink, nonce: str) -> None:
        self.sink = sink
        self._marker_start = b"\n__TREADLE_" + nonce.encode() + b"__ "
        self._held = b""

    def feed(self, data: bytes) -> None:
        data = self._held + data
        end = data.find(self._marker_start)
        if end < 0:
            newline = data.rfind(b"\n")
            maybe = newline >= 0 and self._marker_start.startswith(data[newline:])
            end = newline if maybe else len(data)
        self._held = data[end:]
        if end:
            self.sink.feed(data[:end])


ShellStarter = Callable[[list[str], Path], ShellCommand]
"""How to start the shell (a workspace's ``shell_command``): its argv and private folder in,
the command line, environment and containment out."""


def plain_shell(shell_argv: list[str], private_dir: Path) -> ShellCommand:
    """No sandbox and no environment from this process: a PATH and a locale only."""
    env = unsandboxed_environment(None)
    return ShellCommand(argv=tuple(shell_argv), env=env, private_dir_inside=private_dir)


class BashSession:
    """A live bash in ``cwd``, started by ``start`` (default: as is, with a bare environment),
    with ``env`` added (variables the user passes). Not thread-safe: callers serialize ``run``."""

    def __init__(
        self,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        start: ShellStarter = plain_shell,
    ) -> None:
        bash = shutil.which("bash", path="/usr/bin:/bin")
        if bash is None:
            raise BashSessionError("bash was not found in /usr/bin or /bin: install bash")
        self._max_output = max_output_bytes
        self._exported: dict[str, str] = {}
        folder = TerminalFolder.create()
        self._tmpdir = folder.path
        try:
            shell = start([bash, *_BASH_FLAGS], self._tmpdir)
        except BaseException:
            folder.remove()
            raise
        try:
            folder.record_cgroup(shell.cgroup)  # so that a sweep after a kill finds it
            folder.follow_owner()  # a sandbox run as another user was given the folder
        except BaseException:
            folder.remove()
            if shell.cgroup is not None:
                shell.cgroup.kill()
            raise
        self._cgroup = shell.cgroup
        self._fifo = folder.fifo
        self._fifo_inside = shell.private_dir_inside / COMMAND_FIFO
        master, slave = os.openpty()
        # A wide terminal, so tools that format to the width do not wrap lines.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
        child_env = dict(shell.env)
        child_env.update(env or {})
        child_env.update(
            TERM="dumb", PAGER="cat", GIT_PAGER="cat", MANPAGER="cat", HISTFILE="/dev/null"
        )
        try:
            # No start_new_session: setsid makes the session (it would fork in a group leader).
            # restore_signals (the default) gives the shell SIGPIPE and SIGXFSZ back.
            # Forked by the spawner thread: a sandbox's parent-death signal follows the
            # thread that forked it, and a run's thread ends with the run.
            self._process = spawner.popen(
                launch_argv(shell),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=cwd,
                env=child_env,
            )
        except OSError as error:
            os.close(master)
            os.close(slave)
            folder.remove()
            if shell.cgroup is not None:
                shell.cgroup.kill()
            raise BashSessionError(f"could not start bash in {cwd}: {error}") from error
        os.close(slave)
        self._fd = master
        self._alive = True
        self._finalizer = weakref.finalize(
            self, _terminate, self._process, master, folder, shell.cgroup
        )
        # ``wake`` writes here so that a ``run`` waiting for output checks its ``stop`` now.
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_finalizer = weakref.finalize(self, _close_fds, self._wake_read, self._wake_write)
        self._shell_pid = self._process.pid
        """The interactive bash (the process owning the terminal), which ``_stop_command``
        signals: the one started here, unless a wrapper (a sandbox) started it."""
        try:
            lines = [_INIT]
            if not shell.sandboxed:
                # If this process dies without closing us (SIGKILL), the hung-up shell exits
                # and removes its own temp folder. A sandbox sees it read-only (so that it
                # cannot turn the command file into a link this process would write through).
                remove = f"rm -rf -- {shlex.quote(str(self._tmpdir))}"
                lines.append(f"trap {shlex.quote(remove)} EXIT")
            self._sync(lines, STARTUP_TIMEOUT)
            # At its prompt bash is its terminal's foreground group: the group never to kill.
            self._shell_pid = os.tcgetpgrp(master)
        except (BashSessionError, OSError) as error:
            self.close()
            if isinstance(error, BashSessionError):
                raise
            raise BashSessionError(f"the shell's terminal failed: {error}") from error

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

    def run(
        self,
        command: str,
        timeout: float,
        stop: threading.Event | None = None,
        live: LiveSink | None = None,
    ) -> CommandOutcome:
        """Run ``command`` (any bash, several lines allowed) and return its merged output.
        When ``stop`` is set (before or while it runs; another thread then calls ``wake``),
        the command is stopped now with what it started (see the module's docstring).
        ``live`` is fed the output as it comes (never the end marker); the caller closes it."""
        if not self.alive:
            raise BashSessionError("the shell has exited: start a new session")
        early = _ANY_MARKER.sub(b"", self._drain())
        since = mark()
        nonce = secrets.token_hex(8)
        marker = _EndMarker(nonce)
        output = _BoundedOutput(self._max_output // 2, self._max_output - self._max_output // 2)
        so_far = _OutputSoFar(live, nonce) if live is not None else None
        if early:
            output.feed(early)
            if so_far is not None:
                so_far.feed(early)
        if stop is not None and stop.is_set():  # stopped before it started: never run it
            return CommandOutcome("", "", None, None, False, 0, 0, True, interrupted=True)
        self._write(
            f"__treadle_nonce={nonce}; source {shlex.quote(str(self._fifo_inside))} </dev/null\n"
        )
        text = command if command.endswith("\n") else command + "\n"
        try:
            self._hand_over(text.encode(), time.monotonic() + STARTUP_TIMEOUT)
        except BaseException:
            # bash may be left waiting on the FIFO, out of step with the next command.
            self.close()
            raise
        try:
            match = self._read_until(marker, output, time.monotonic() + timeout, stop, so_far)
        except BaseException:  # Ctrl-C in this thread: the command must not outlive the call
            if self._stop_command(marker, output, since)[0] is None:
                self.close()
            raise
        interrupted = match is None and stop is not None and stop.is_set()
        notices = b""
        if interrupted:
            match, notices = self._stop_command(marker, output, since)
        timed_out = match is None and not interrupted and self.alive
        if timed_out:
            match = self._interrupt(marker, output)
        if match is None:
            head, tail, cut = output.body()
            self.close()  # waits for bash, so its exit status is known below
            return CommandOutcome(
                head=_decode(head),
                tail=_decode(tail),
                exit_code=None if timed_out or interrupted else self._process.returncode,
                cwd=None,
                timed_out=timed_out,
                truncated_bytes=cut,
                total_bytes=len(head) + cut + len(tail),
                shell_alive=False,
                interrupted=interrupted,
            )
        head, tail, cut = output.body(match.start())
        if notices:
            head, tail = (head, tail + notices) if cut or tail else (head + notices, tail)
        return CommandOutcome(
            head=_decode(head),
            tail=_decode(tail),
            exit_code=int(match.group(1)),
            cwd=match.group(2).decode("utf-8", "replace"),
            timed_out=timed_out,
            truncated_bytes=cut,
            total_bytes=len(head) + cut + len(tail),
            shell_alive=True,
            interrupted=interrupted,
        )

    def _hand_over(self, data: bytes, deadline: float) -> None:
        """Write the command into the FIFO bash is opening (``source``), then close it: bash
        reads it to the end and runs it. ``BashSessionError`` when bash does not take it."""
        fd: int | None = None
        while fd is None:
            try:
                # Non-blocking: ENXIO until bash has the FIFO open for reading.
                flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW
                fd = os.open(self._fifo, flags)
            except OSError as error:
                if error.errno != errno.ENXIO:
                    raise BashSessionError(f"cannot hand the command to bash: {error}") from None
                if self._process.poll() is not None or time.monotonic() >= deadline:
                    raise BashSessionError(
                        "bash did not take the command (it exited or stopped answering)"
                    ) from None
                time.sleep(_HAND_OVER_POLL_S)
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # replaced: never write a file
                raise BashSessionError(f"{self._fifo} is no longer the terminal's FIFO")
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    poller = select.poll()
                    poller.register(fd, select.POLLOUT)
                    if remaining <= 0 or not poller.poll(math.ceil(remaining * 1000)):
                        raise BashSessionError("bash stopped reading the command") from None
                except BrokenPipeError:
                    raise BashSessionError("bash stopped reading the command") from None
        finally:
            os.close(fd)

    def wake(self) -> None:
        """Make a ``run`` in progress check its ``stop`` event now. Any thread may call it."""
        with contextlib.suppress(OSError):  # full (already woken) or closed (session ended)
            os.write(self._wake_write, b"!")

    def close(self) -> None:
        """Hang up the terminal (bash passes SIGHUP to its jobs), then kill what remains."""
        self._alive = False
        self._finalizer()
        self._wake_finalizer()

    def _stop_command(
        self, marker: _EndMarker, output: _BoundedOutput, since: Mark
    ) -> tuple[re.Match[bytes] | None, bytes]:
        """Stop the running command and what it started since ``since`` (see the module's
        docstring). Returns the marker when the shell came back to its prompt (else None), and
        the shell's notices of the jobs it killed (``[1]+ Killed ...``), which belong to this
        command: without ``_settle`` a job reaped late would be reported in the next one's."""
        deadline = time.monotonic() + INTERRUPT_GRACE
        roots = (self._process.pid, self._shell_pid)
        with contextlib.suppress(OSError):
            # Bash abandons the rest of the command line (a script, a loop) rather than run
            # its next line when the process in front is killed.
            os.kill(self._shell_pid, signal.SIGINT)
        while True:
            kill_started_since(roots, since)
            match = self._read_until(
                marker, output, min(deadline, time.monotonic() + _KILL_SWEEP_S)
            )
            if match is not None:
                kill_started_since(roots, since)  # background jobs it started
                return match, self._settle(since, deadline)
            if not self.alive or time.monotonic() >= deadline:
                return None, b""

    def _settle(self, since: Mark, deadline: float) -> bytes:
        """Wait until the shell has reaped the jobs started since ``since`` (all are killed),
        then let it print its notices of them (it does before reading its next line) and return
        them, bounded. Empty when the shell does not answer by ``deadline``."""
        while children_started_since(self._shell_pid, since) and time.monotonic() < deadline:
            time.sleep(_REAP_POLL_S)
        # Two lines, as bash prints its notices before reading a line but after the marker of the
        # line before: they fall between these two lines' markers. (Assignments: never aliased.)
        nonce = secrets.token_hex(8)
        self._write(f"__treadle_nonce={secrets.token_hex(8)}\n__treadle_nonce={nonce}\n")
        late = _BoundedOutput(_NOTICES_LIMIT, 0)
        match = self._read_until(_EndMarker(nonce), late, deadline)
        if match is None:
            return b""
        head, _tail, _cut = late.body(match.start())
        return _ANY_MARKER.sub(b"", head)

    def _interrupt(self, marker: _EndMarker, output: _BoundedOutput) -> re.Match[bytes] | None:
        # The command's process group, named before Ctrl-C hands the terminal back to bash.
        group: int | None = None
        with contextlib.suppress(OSError):
            group = os.tcgetpgrp(self._fd)
        if group == self._shell_pid:
            group = None  # a builtin loop runs in bash itself: Ctrl-C is all it gets
        # Ctrl-C first: bash then abandons the rest of the command line (a loop stops too).
        self._write("\x03")
        match = self._read_until(marker, output, time.monotonic() + INTERRUPT_GRACE)
        if group is not None:
            # Its children too: a child a command put in the background ignores Ctrl-C.
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        if match is not None or not self.alive:
            return match
        return self._read_until(marker, output, time.monotonic() + INTERRUPT_GRACE)

    def _sync(self, lines: list[str], timeout: float) -> None:
        """Run internal lines and wait until bash has processed them; their output is dropped."""
        nonce = secrets.token_hex(8)
        for line in lines:
            self._write(line + "\n")
        self._write(f"__treadle_nonce={nonce}\n")
        marker = _EndMarker(nonce)
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
        self,
        marker: _EndMarker,
        output: _BoundedOutput,
        deadline: float,
        stop: threading.Event | None = None,
        so_far: _OutputSoFar | None = None,
    ) -> re.Match[bytes] | None:
        """The marker once read; None at ``deadline``, when the shell is gone, or when
        ``stop`` is set (checked whenever ``wake`` is called). ``so_far`` is fed what is read,
        and ticked when its waiting output falls due."""
        while True:
            match = output.find(marker)
            if match is not None:
                return match
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._alive:
                return None
            if stop is not None and stop.is_set():
                return None
            due = so_far.sink.wait_s() if so_far is not None else None
            if not self._wait_readable(
                min(remaining, due) if due is not None else remaining, stop is not None
            ):
                if so_far is not None:
                    so_far.sink.tick()
                continue
            data = self._read_available()
            if data is None:
                return None
            output.feed(data)
            if so_far is not None:
                so_far.feed(data)

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

    def _wait_readable(self, timeout: float, wakeable: bool) -> bool:
        """Whether the shell has output within ``timeout``; False early when woken."""
        if not wakeable:
            return _readable(self._fd, timeout)
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_read, select.POLLIN)
        ready = {fd for fd, _event in poller.poll(math.ceil(max(timeout, 0.0) * 1000))}
        if self._wake_read in ready:
            with contextlib.suppress(OSError):
                os.read(self._wake_read, 4096)
        return self._fd in ready

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


def _close_fds(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _terminate(
    process: subprocess.Popen[bytes], fd: int, folder: TerminalFolder, cgroup: PidsCgroup | None
) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
    try:
        process.wait(timeout=INTERRUPT_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=INTERRUPT_GRACE)
    if cgroup is not None:
        cgroup.kill()  # whatever is left of the sandbox (a fork bomb's children)
    folder.remove()
