"""``treadle chat`` (issue 26) through a real pty: two messages typed at the prompt, a waiting
call confirmed with y, then Ctrl-D leaves; the stored conversation holds both turns. And
``treadle chat -c`` continues the workspace's last conversation."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import NoReturn

from support.scripts import write_script
from treadle.events.model import MessageEvent, ObservationEvent
from treadle.store.urls import open_store

PROMPT = b"you> "
EOF_KEY = b"\x04"  # Ctrl-D on a terminal in canonical mode: end of input at the prompt


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pty, so Ctrl-C
    typed there is a SIGINT to it, as in a user's terminal."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtyChild:
    """``python -m treadle ARGS`` on a pty, read as a user sees it."""

    def __init__(self, args: list[str], cwd: Path | None = None) -> None:
        self.leader, follower = pty.openpty()
        # PYTHONFAULTHANDLER: a child that hangs is sent SIGABRT and shows every thread's stack
        env = {**os.environ, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"}
        env.pop("TREADLE_STORE", None)
        env.pop("TREADLE_MODEL", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "treadle", *args],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
            cwd=cwd,
            close_fds=True,
            preexec_fn=_own_terminal,
        )
        os.close(follower)
        self.seen = b""

    def wait_for(self, text: bytes, count: int, timeout_s: float = 60.0) -> None:
        """Read until ``text`` has been shown ``count`` times (polling, generous deadline)."""
        deadline = time.monotonic() + timeout_s
        while self.seen.count(text) < count:
            if time.monotonic() > deadline:
                self._fail_with_stacks(f"{text!r} was not shown {count} times in {timeout_s} s")
            chunk = self._read_chunk()
            if chunk is not None:
                assert chunk, f"ended early:\n{self.seen.decode(errors='replace')}"
            elif self.process.poll() is not None:
                raise AssertionError(f"exited:\n{self.seen.decode(errors='replace')}")

    def send(self, data: bytes) -> None:
        os.write(self.leader, data)

    def finish(self, timeout_s: float = 60.0) -> int:
        """The exit code; a child still running after ``timeout_s`` fails the test with the
        stacks of its threads (SIGABRT, shown by faulthandler)."""
        try:
            if self._read_until_exit(timeout_s):
                return self.process.wait()
            self._fail_with_stacks(f"still running {timeout_s:.0f} s after it was told to leave")
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            os.close(self.leader)

    def _fail_with_stacks(self, what: str) -> NoReturn:
        """An AssertionError with what it showed, ending with its threads' stacks."""
        self.process.send_signal(signal.SIGABRT)
        self._read_until_exit(10.0)
        raise AssertionError(f"{what}:\n{self.seen.decode(errors='replace')}")

    def _read_until_exit(self, timeout_s: float) -> bool:
        """Read what it shows until it exits (True) or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            chunk = self._read_chunk()
            if chunk == b"":  # every holder of the terminal closed it: it is ending
                try:
                    self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    return False
                return True
            if chunk is None and self.process.poll() is not None:
                return True
        return False

    def _read_chunk(self) -> bytes | None:
        """What it showed within 0.2 s (added to ``seen``): None if nothing, b"" at the end."""
        ready, _, _ = select.select([self.leader], [], [], 0.2)
        if not ready:
            return None
        try:
            chunk = os.read(self.leader, 4096)
        except OSError:  # EIO: the terminal's other side is closed
            chunk = b""
        self.seen += chunk
        return chunk


def _stored(url: str) -> tuple[str, list]:
    store = open_store(url)
    try:
        (info,) = store.list_conversations()
        return info.id, [item.event for item in store.get_range(info.id, 0, 10**6)]
    finally:
        store.close()


def _user_messages(events: list) -> list[str]:
    return [e.text for e in events if isinstance(e, MessageEvent) and e.role == "user"]


# the shell also writes down its own blocked signals (its mask is inherited from the thread
# that started it)
SHELL_COMMAND = "echo hi > a.txt; grep SigBlk /proc/$$/status > mask.txt"


def _signal_blocked(status_path: Path, signum: int) -> bool:
    """Whether the task whose /proc status file this is blocks ``signum``."""
    for line in status_path.read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    raise AssertionError(f"no SigBlk in {status_path}")


def _threads_taking_ctrl_c(pid: int) -> list[int]:
    """The threads of ``pid``, other than its main one, that may be given a SIGINT."""
    tasks = Path(f"/proc/{pid}/task")
    return [
        int(task.name)
        for task in tasks.iterdir()
        if int(task.name) != pid and not _signal_blocked(task / "status", signal.SIGINT)
    ]


def test_chat_two_messages_a_confirmation_then_eof(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": SHELL_COMMAND}}]},
            {"text": "wrote a.txt"},
            {"text": "second answer"},
            {"text": "third answer"},
        ],
    )
    common = ["--script", str(script), "--sandbox", "none", "--store", url]
    child = PtyChild(["chat", "--workspace", str(workspace), "--confirm", "risky", *common])
    child.wait_for(PROMPT, 1)
    child.send(b"write a file\n")
    child.wait_for(b"[y/n]", 1)
    child.send(b"y\n")
    child.wait_for(PROMPT, 2)
    assert b"wrote a.txt" in child.seen
    # A Ctrl-C that Linux gives to another thread never reaches the prompt's read (Python
    # handles signals on the main thread): only the main thread may take it, while the
    # terminal's shell, started from the spawner thread, still takes its own Ctrl-C.
    assert _threads_taking_ctrl_c(child.process.pid) == []
    assert not _signal_blocked(workspace / "mask.txt", signal.SIGINT)
    child.send(b"and then?\n")
    child.wait_for(PROMPT, 3)
    assert b"second answer" in child.seen
    child.send(EOF_KEY)
    code = child.finish()
    shown = child.seen.decode(errors="replace")
    assert code == 0, shown
    assert "Traceback" not in shown

    conversation_id, events = _stored(url)
    assert _user_messages(events) == ["write a file", "and then?"]
    assert (workspace / "a.txt").read_text() == "hi\n"  # the confirmed call ran
    assert any(isinstance(e, ObservationEvent) for e in events)

    # chat -c in the workspace continues it; Ctrl-C twice at the prompt leaves
    again = PtyChild(["chat", "-c", "--store", url], cwd=workspace)
    again.wait_for(PROMPT, 1)
    assert conversation_id.encode() in again.seen
    # typed slowly, with a correction: the prompt's wake-ups (see chat_commands) lose no key
    for key in [b"once", b" ", b"mo", b"x", b"\x7f", b"re"]:
        again.send(key)
        time.sleep(0.25)  # a person typing, not a wait for something
    again.send(b"\n")
    again.wait_for(PROMPT, 2)
    assert b"third answer" in again.seen
    again.send(b"\x03")
    again.wait_for(b"Ctrl-C again", 1)
    again.send(b"\x03")
    assert again.finish() == 0, again.seen.decode(errors="replace")
    _, events = _stored(url)
    assert _user_messages(events) == ["write a file", "and then?", "once more"]
