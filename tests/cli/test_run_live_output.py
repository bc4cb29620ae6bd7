"""``treadle run``'s live view shows a command's output while it runs, masked, before the
stored observation's line; the store holds the observation as before and nothing else."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from rich.console import Console

from support.scripts import assert_store_audits_clean, write_script
from treadle.cli.live_output import LiveOutputView
from treadle.runtime.live_output import OutputChunk
from treadle.store.urls import open_store


def test_the_live_view_shows_output_before_the_command_ends(tmp_path: Path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "key.txt").write_text("sk-cli-Zq7Xw9Lp2Vb4")
    command = "echo live-$((20+22)); cat key.txt; echo; sleep 2; echo done-$((1+1))"
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
        ],
    )
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    arguments = ["run", "print, wait, print", "--create-workspace", "--workspace", str(workspace)]
    arguments.append("--script")
    child = subprocess.Popen(
        [sys.executable, "-m", "treadle", *arguments, str(script), "--store", store_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        # The model key is masked everywhere: the command prints it.
        env={**os.environ, "COLUMNS": "200", "TREADLE_API_KEY": "sk-cli-Zq7Xw9Lp2Vb4"},
    )
    watchdog = threading.Timer(120, child.kill)
    watchdog.start()
    lines: list[tuple[float, str]] = []
    assert child.stdout is not None
    for line in child.stdout:
        lines.append((time.monotonic(), line.rstrip("\n")))
    child.wait()
    watchdog.cancel()
    assert child.returncode == 0, child.stderr.read() if child.stderr else ""

    def first(predicate) -> tuple[int, float]:
        return next((i, at) for i, (at, line) in enumerate(lines) if predicate(line))

    live_index, live_at = first(lambda line: "│ live-42" in line)
    done_index, _ = first(lambda line: "│ done-2" in line)
    result_index, result_at = first(lambda line: " observation " in line)
    assert live_index < done_index < result_index
    assert result_at - live_at > 1.5  # shown while the command slept
    assert any("│ <secret:TREADLE_API_KEY>" in line for _, line in lines)
    assert not any("Zq7X" in line for _, line in lines)

    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
        stored = store.get_range(info.id, 0, 1000)
    finally:
        store.close()
    observations = [item.event for item in stored if item.event.kind == "observation"]
    assert observations[0].content.startswith(
        "live-42\n<secret:TREADLE_API_KEY>\ndone-2\n[exit code 0"
    )
    assert not any(
        "live-42" in (item.payload or "") for item in stored if item.event.kind != "observation"
    )
    assert_store_audits_clean(store_url)


def test_the_live_view_never_sends_a_commands_control_characters_to_the_terminal():
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    view = LiveOutputView(console)
    view(OutputChunk("c", "a1", "call-1", "terminal", 0, "red \x1b[31mtext\x1b]0;title\x07\r\n"))
    view(OutputChunk("c", "a1", "call-1", "terminal", 5000, "later\n"))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "red ␛[31mtext␛]0;title␇" in shown
    assert "[... earlier output not shown ...]" in shown  # the gap the offset shows
