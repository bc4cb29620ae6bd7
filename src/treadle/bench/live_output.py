"""What streaming a command's output costs the terminal (``treadle bench runtime``): a chatty
command run with a live-output listener and without one, alternating, and the chunks it made."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from treadle.events.model import ActionEvent
from treadle.runtime.live_output import LiveOutput, OutputChunk
from treadle.runtime.secrets import Secrets
from treadle.runtime.tools import ToolContext
from treadle.runtime.tools.terminal import TerminalArguments, TerminalTool
from treadle.runtime.workspace import LocalWorkspace

CHATTY = "seq 1 400000"
"""About 2.7 MB of output in 400,000 lines, as fast as the shell can print it."""
MASKED = "bench-secret-Zq7Xw9Lp2Vb4"
"""A registered secret, so every chunk is masked and checked for a secret's start."""


def run_live_output_bench(runs: int = 7) -> dict[str, Any]:
    """Median seconds of ``CHATTY`` with and without a listener (secrets registered in both),
        their ratio, and the chunks the last streamed run made (the first at once, then at most ten
    a second, and the rest when it ends)."""
    call = ActionEvent(
        tool_call_id="bench",
        tool_name="terminal",
        arguments={},
        raw_arguments="{}",
        llm_response_id="bench",
    )
    chunks: list[OutputChunk] = []
    secrets = Secrets({"BENCH_SECRET": MASKED})
    seconds: dict[str, list[float]] = {"plain": [], "live": []}
    tool = TerminalTool()
    with tempfile.TemporaryDirectory(prefix="treadle-bench-") as tmp:
        workspace = LocalWorkspace(Path(tmp), create=True)
        contexts = {
            "plain": ToolContext(workspace, secrets, conversation_id="bench", call=call),
            "live": ToolContext(
                workspace,
                secrets,
                conversation_id="bench",
                live_output=LiveOutput([chunks.append]),
                call=call,
            ),
        }
        try:
            tool.run(TerminalArguments(command="true"), contexts["plain"])  # its shell started
            for _ in range(runs):
                for kind, context in contexts.items():
                    chunks.clear()
                    begin = time.perf_counter()
                    tool.run(TerminalArguments(command=CHATTY), context)
                    seconds[kind].append(time.perf_counter() - begin)
        finally:
            tool.close()
    plain_s, live_s = statistics.median(seconds["plain"]), statistics.median(seconds["live"])
    return {
        "chatty_command_s": plain_s,
        "chatty_command_live_s": live_s,
        "live_output_ratio": live_s / plain_s,
        "live_output_chunks": len(chunks),
    }
