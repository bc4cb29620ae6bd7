"""The terminal's interrupt against a real bash: the running command and every process it
started (background jobs too) are killed now, the rest of its command line never runs, the
shell survives with its state, and earlier background jobs are left alone."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from support.processes import alive
from support.waiting import wait_until
from treadle.runtime.tools import ToolContext, ToolResult, ToolSet, bash_session, process_tree
from treadle.runtime.tools.bash_session import BashSession
from treadle.runtime.tools.process_tree import _PID_MAX, Mark

STOPPED_WITHIN_S = 8.0
"""Seconds an interrupt may take to stop a call: far below what the calls here would take
unstopped (30 s and more), and room for a loaded machine (a bound of 1.5 s was timing luck)."""


def _pid(path: Path) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip() != "", what=str(path))
    return int(path.read_text())


class _Call:
    """A terminal call running in a thread, as a conversation's run makes it."""

    def __init__(self, tools: ToolSet, context: ToolContext, command: str) -> None:
        self.result: ToolResult | None = None
        self._thread = threading.Thread(
            target=self._run, args=(tools, context, command), daemon=True
        )
        self._thread.start()

    def _run(self, tools: ToolSet, context: ToolContext, command: str) -> None:
        self.result = tools.call("terminal", {"command": command, "timeout": 60}, context)

    def join(self, timeout_s: float) -> ToolResult:
        self._thread.join(timeout_s)
        assert self.result is not None, f"the call did not return within {timeout_s} s"
        return self.result


def _interrupt(tools: ToolSet, context: ToolContext) -> float:
    context.interruption.set()
    tools.interrupt(context)
    return time.monotonic()


def test_interrupt_kills_the_command_and_its_background_jobs_and_keeps_the_shell(
    tools: ToolSet, context: ToolContext
) -> None:
    root = context.workspace.root
    tools.call("terminal", {"command": "export KEPT=yes; sleep 300 & echo $! > old.pid"}, context)
    old_job = _pid(root / "old.pid")
    call = _Call(
        tools,
        context,
        "sleep 300 & echo $! > bg.pid; bash -c 'echo $$ > fg.pid; exec sleep 30'; touch ran-on",
    )
    started = [_pid(root / "fg.pid"), _pid(root / "bg.pid")]
    sent = _interrupt(tools, context)
    result = call.join(10)
    assert time.monotonic() - sent < STOPPED_WITHIN_S
    assert result.data["interrupted"] is True
    assert result.is_error is True
    assert "interrupted by the user" in result.content
    wait_until(lambda: not any(alive(pid) for pid in started), timeout_s=30, what="killed")
    assert not (root / "ran-on").exists()
    assert alive(old_job), result.content  # an earlier command's job is not this one's

    context.interruption.clear()  # the next run
    after = tools.call("terminal", {"command": 'echo "still $KEPT"; kill %1'}, context)
    assert "still yes" in after.content.splitlines(), after.content
    assert after.data["shell_ended"] is False
    wait_until(lambda: not alive(old_job), timeout_s=30, what="the old job ends")


@pytest.mark.parametrize(
    "command",
    [
        "while true; do :; done",  # bash itself, no child process
        "for i in $(seq 100); do sleep 1; done",  # a new child after each kill
        "sh -c 'trap \"\" INT TERM; sleep 100'",  # a child that ignores SIGINT
    ],
)
def test_interrupt_stops_loops_and_stubborn_children(
    tools: ToolSet, context: ToolContext, command: str
) -> None:
    call = _Call(tools, context, f"touch started; {command}")
    wait_until(lambda: (context.workspace.root / "started").exists())
    time.sleep(0.2)  # well inside the command
    sent = _interrupt(tools, context)
    result = call.join(10)
    assert time.monotonic() - sent < STOPPED_WITHIN_S
    assert result.data["interrupted"] is True
    context.interruption.clear()
    assert tools.call("terminal", {"command": "echo $((6 * 7))"}, context).content.startswith(
        "42\n"
    )


def test_a_call_interrupted_before_it_starts_never_runs(
    tools: ToolSet, context: ToolContext
) -> None:
    context.interruption.set()
    result = tools.call("terminal", {"command": "touch ran"}, context)
    assert result.data["interrupted"] is True
    assert not (context.workspace.root / "ran").exists()


def test_ctrl_c_in_the_running_thread_stops_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bash_session, "INTERRUPT_GRACE", 30.0)  # a loaded machine is slow to stop
    session = BashSession(tmp_path)
    main = threading.get_ident()

    def ctrl_c_once_running() -> None:  # not after a fixed delay: the command may not run yet
        _pid(tmp_path / "bg.pid")
        signal.pthread_kill(main, signal.SIGINT)

    timer = threading.Thread(target=ctrl_c_once_running, daemon=True)
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            session.run("sleep 300 & echo $! > bg.pid; sleep 30; touch ran-on", 60)
        assert not alive(_pid(tmp_path / "bg.pid"))
        assert not (tmp_path / "ran-on").exists()
        assert session.run("echo ok", 10).head == "ok\n"  # the same shell goes on
    finally:
        timer.join(timeout=60)
        session.close()


def test_the_notice_of_a_killed_job_goes_with_the_stopped_command_not_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loaded machine: the background job is killed (and reaped) only after bash has already
    # printed the stopped command's marker, so its "[1]+ Killed" notice comes late.
    real_kill = bash_session.kill_started_since
    fg_pid = tmp_path / "fg.pid"

    def kill_the_job_last(roots: tuple[int, ...], since: Mark) -> list[int]:
        spared = {int(fg_pid.read_text())} if fg_pid.exists() else set()
        if any(alive(pid) for pid in spared):  # the job lives on until the command has ended
            job = int((tmp_path / "bg.pid").read_text())
            pids = [pid for pid in process_tree.started_since(roots, since) if pid != job]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            return pids
        return real_kill(roots, since)

    monkeypatch.setattr(bash_session, "kill_started_since", kill_the_job_last)
    session = BashSession(tmp_path)
    stop = threading.Event()

    def stop_once_running() -> None:
        _pid(fg_pid)
        stop.set()
        session.wake()

    stopper = threading.Thread(target=stop_once_running, daemon=True)
    try:
        stopper.start()
        command = "sleep 300 & echo $! > bg.pid; bash -c 'echo $$ > fg.pid; exec sleep 30'"
        stopped = session.run(command, 60, stop=stop)
        assert stopped.interrupted
        assert "Killed                  sleep 300" in stopped.output, stopped.output
        assert not alive(_pid(tmp_path / "bg.pid"))
        assert session.run("echo ok", 10).output == "ok\n"
    finally:
        stopper.join(timeout=60)
        session.close()


def test_a_session_frees_its_descriptors(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    session = BashSession(tmp_path)
    assert len(os.listdir("/proc/self/fd")) > before
    session.close()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_mark_orders_processes_by_tick_then_by_pid_across_the_wrap() -> None:
    marked = Mark(tick=100, last_pid=500)
    assert marked.precedes(pid=10, start_tick=101)  # a later tick, whatever the pid
    assert not marked.precedes(pid=900, start_tick=99)
    assert marked.precedes(pid=501, start_tick=100)  # same tick: handed out after
    assert not marked.precedes(pid=500, start_tick=100)
    assert not marked.precedes(pid=499, start_tick=100)
    wrapped = Mark(tick=100, last_pid=_PID_MAX - 1)
    assert wrapped.precedes(pid=300, start_tick=100)  # handed out after the wrap
    assert Mark(tick=100, last_pid=None).precedes(pid=1, start_tick=100)  # unknown: the command's
