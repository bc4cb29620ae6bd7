"""The terminal tool against a real bash: persistence, exit codes, timeouts, truncation, capture."""

import os
import resource
import signal
import time
from pathlib import Path

import pytest

from support.processes import alive
from support.waiting import wait_until
from treadle.runtime.tools import TerminalTool, ToolContext, ToolResult, ToolSet, bash_session


def run(tools: ToolSet, context: ToolContext, command: str, **extra: object) -> ToolResult:
    return tools.call("terminal", {"command": command, **extra}, context)


def test_cd_and_export_persist_between_calls(tools: ToolSet, context: ToolContext) -> None:
    (context.workspace.root / "sub").mkdir()
    first = run(tools, context, "cd sub && export GREETING=hello")
    assert first.data["exit_code"] == 0
    assert first.data["cwd"] == str(context.workspace.root / "sub")

    second = run(tools, context, 'pwd; echo "$GREETING"')
    assert second.content.splitlines()[:2] == [str(context.workspace.root / "sub"), "hello"]
    assert second.content.endswith(f"[exit code 0; cwd: {context.workspace.root / 'sub'}]")


def test_starts_in_the_workspace_and_reports_exit_codes(
    tools: ToolSet, context: ToolContext
) -> None:
    assert run(tools, context, "pwd").content.splitlines()[0] == str(context.workspace.root)
    failed = run(tools, context, "echo oops >&2; exit_with() { return $1; }; exit_with 7")
    assert failed.data["exit_code"] == 7
    assert failed.content.splitlines()[0] == "oops"  # stderr is merged
    assert failed.is_error is False  # a failing command is a result, not a tool failure
    assert run(tools, context, "false").data["exit_code"] == 1


def test_multiline_script_and_output_without_final_newline(
    tools: ToolSet, context: ToolContext
) -> None:
    result = run(tools, context, "for i in 1 2 3; do\n  echo line$i\ndone\nprintf tail")
    assert result.content.splitlines()[:4] == ["line1", "line2", "line3", "tail"]


def test_timeout_kills_the_command_and_the_session_survives(
    tools: ToolSet, context: ToolContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The grace a command gets to stop after Ctrl-C, made generous: on a loaded machine 1 s
    # can pass before `sleep` has died of it, and then SIGKILL (137) would stop it instead.
    monkeypatch.setattr(bash_session, "INTERRUPT_GRACE", 30.0)
    pid_file = tmp_path / "sleeper.pid"
    run(tools, context, "export KEPT=yes")
    started = time.monotonic()
    result = run(tools, context, f"sh -c 'echo $$ > {pid_file}; exec sleep 100'", timeout=0.5)
    assert time.monotonic() - started < 60  # 0.5 s, plus slack for a busy machine; not 100 s
    assert result.is_error is True
    assert result.data["timed_out"] is True
    assert result.data["exit_code"] == 130  # interrupted by Ctrl-C (SIGINT)
    assert "timed out after 0.5 s" in result.content
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)

    after = run(tools, context, 'echo "still $KEPT"')
    assert after.content.splitlines()[0] == "still yes"
    assert after.data["exit_code"] == 0


def test_a_command_ignoring_ctrl_c_is_killed(tools: ToolSet, context: ToolContext) -> None:
    result = run(tools, context, "bash -c \"trap '' INT; sleep 100\"", timeout=0.3)
    assert result.data["timed_out"] is True
    assert result.data["exit_code"] == 137  # SIGKILL of its process group
    assert run(tools, context, "echo ok").content.startswith("ok\n")


def test_a_shell_loop_is_interrupted(tools: ToolSet, context: ToolContext) -> None:
    result = run(tools, context, "while true; do :; done", timeout=0.3)
    assert result.data["timed_out"] is True
    assert run(tools, context, "echo $((6 * 7))").content.startswith("42\n")


def test_huge_output_keeps_head_and_tail_with_a_note(context: ToolContext) -> None:
    tool = TerminalTool(max_output_bytes=2000)
    tools = ToolSet([tool])
    try:
        result = run(tools, context, "seq 1 100000")
    finally:
        tools.close()
    total = sum(len(str(number)) + 1 for number in range(1, 100001))
    cut = total - 2000
    assert result.data["truncated_bytes"] == cut
    assert f"[... {cut} bytes of output cut here ({total} bytes in all)" in result.content
    lines = result.content.splitlines()
    assert lines[:3] == ["1", "2", "3"]
    assert lines[-2] == "100000"
    assert result.data["exit_code"] == 0
    assert len(result.content) < 2600


def test_sentinel_like_output_does_not_break_capture(tools: ToolSet, context: ToolContext) -> None:
    fake = "__TREADLE_0123456789abcdef__ 0 /nowhere"
    result = run(
        tools, context, f"echo '\n{fake}'; echo after; exit_code() {{ return 3; }}; exit_code"
    )
    assert result.content.splitlines()[:3] == ["", fake, "after"]
    assert result.data["exit_code"] == 3
    assert result.data["cwd"] == str(context.workspace.root)


def test_exit_ends_the_shell_and_the_next_call_starts_a_new_one(
    tools: ToolSet, context: ToolContext
) -> None:
    run(tools, context, "export GONE=1; cd /")
    ended = run(tools, context, "exit 4")
    assert ended.data["shell_ended"] is True
    assert ended.data["exit_code"] == 4
    assert "the next command starts a new shell in the workspace folder" in ended.content
    fresh = run(tools, context, 'pwd; echo "[$GONE]"')
    assert fresh.content.splitlines()[:2] == [str(context.workspace.root), "[]"]


def test_a_shell_killed_between_calls_is_replaced_with_a_note(
    tools: ToolSet, context: ToolContext
) -> None:
    shell_pid = int(run(tools, context, "echo $$").content.splitlines()[0])
    os.kill(shell_pid, signal.SIGKILL)
    wait_until(lambda: not alive(shell_pid), what="the killed shell gone")
    fresh = run(tools, context, "echo back")
    assert fresh.content.splitlines()[:2] == [
        "[the previous shell had exited: a new one was started in the workspace folder, "
        "so earlier cd and exported variables are gone]",
        "back",
    ]


def test_reset_starts_a_clean_shell(tools: ToolSet, context: ToolContext) -> None:
    run(tools, context, "cd / && export X=1")
    result = run(tools, context, 'pwd; echo "[$X]"', reset=True)
    assert result.content.splitlines()[1:3] == [str(context.workspace.root), "[]"]


def test_sessions_are_separate_per_conversation(tools: ToolSet, context: ToolContext) -> None:
    other = ToolContext(workspace=context.workspace, secrets=context.secrets, conversation_id="b")
    run(tools, context, "export WHO=first")
    assert run(tools, other, 'echo "[$WHO]"').content.startswith("[]\n")
    assert run(tools, context, 'echo "[$WHO]"').content.startswith("[first]\n")


def test_stdin_is_closed_so_reading_does_not_hang(tools: ToolSet, context: ToolContext) -> None:
    result = run(tools, context, "read -r line; echo rc=$?", timeout=5)
    assert result.content.startswith("rc=1\n")
    assert result.data["timed_out"] is False


def test_flags_and_risk(tools: ToolSet) -> None:
    terminal = tools["terminal"]
    assert terminal.parallel_safe is False
    assert terminal.risky(terminal.arguments_model(command="ls")) is True
    assert tools.can_run_in_parallel(["terminal", "think"]) is False
    assert tools.can_run_in_parallel(["file_editor", "think"]) is True


def test_works_when_the_process_holds_more_than_1024_fds(
    tools: ToolSet, context: ToolContext
) -> None:
    # A busy server (many sockets, store connections) hands the shell's pty an fd past 1024,
    # where select.select raises ValueError: the terminal must not depend on select.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard fd limit ({hard}) is too low to pass fd 1024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held: list[int] = []
    try:
        held.append(os.open(os.devnull, os.O_RDONLY))
        while held[-1] < 1100:  # every lower fd taken: the shell's pty gets one past 1100
            held.append(os.dup(held[0]))
        result = run(tools, context, "echo past-1024")
        assert result.data["exit_code"] == 0
        assert result.content.splitlines()[0] == "past-1024"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
