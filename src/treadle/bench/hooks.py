"""What a hook costs a call (``treadle bench runtime``): one ``PreToolUse`` hook run that reads
its input and allows, unsandboxed and in a bubblewrap sandbox of its own, alternating."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from treadle.data.hooks import HookCommand
from treadle.runtime.hooks.process import run_hook
from treadle.runtime.settings import ConversationSettings, SandboxSettings, build_workspace

PAYLOAD = {
    "hook_event_name": "PreToolUse",
    "tool_name": "terminal",
    "tool_input": {"command": "ls"},
}


def run_hook_bench(runs: int = 30) -> dict[str, Any]:
    """Median seconds of one hook run (start, stdin, exit, its processes and cgroup ended)."""
    hook = HookCommand(command="cat >/dev/null")
    kinds = {"plain": SandboxSettings(kind="none"), "sandbox": SandboxSettings()}
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="treadle-bench-") as tmp:
        workspaces = {
            kind: build_workspace(
                ConversationSettings.litellm("bench", Path(tmp) / kind, sandbox=sandbox)
            )
            for kind, sandbox in kinds.items()
        }
        for _ in range(runs):
            for kind, workspace in workspaces.items():
                begin = time.perf_counter()
                done = run_hook(hook, PAYLOAD, workspace, mount_files=False)
                seconds[kind].append(time.perf_counter() - begin)
                if done.exit_code != 0:
                    raise RuntimeError(f"the bench's hook failed ({kind}): {done}")
    return {
        "hook_run_s": statistics.median(seconds["plain"]),
        "sandbox_hook_run_s": statistics.median(seconds["sandbox"]),
    }
