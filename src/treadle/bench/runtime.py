"""``treadle bench runtime``: Treadle's own overhead per agent step (store + projection) with
short and long histories (the model answers instantly and the tool, think, does nothing), and
what the sandbox costs the terminal: per command, and to start a conversation's shell."""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from treadle.bench.workload import realistic_events
from treadle.events.model import TokenUsage
from treadle.runtime.conversation import Conversation
from treadle.runtime.llm.base import ModelResponse, ToolCall
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import ConversationSettings, SandboxSettings, build_workspace
from treadle.runtime.tools import TerminalTool, ToolContext, ToolSet
from treadle.store.urls import open_store

NO_SANDBOX = SandboxSettings(kind="none")


class InstantThinkModel:
    """Answers every model call at once with one ``think`` call: no model time in the figures."""

    name = "instant-think"

    def __init__(self) -> None:
        self._steps = itertools.count()

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        step = next(self._steps)
        return ModelResponse(
            id=f"bench-response-{step}",
            tool_calls=(ToolCall(f"bench-call-{step}", "think", f'{{"thought": "step {step}"}}'),),
            usage=TokenUsage(),
        )


def _step_seconds(history: int, steps: int, folder: Path, durability: str) -> float:
    store = open_store(f"sqlite:///{folder / f'runtime-{history}.db'}?durability={durability}")
    # The model's name is only stored; the instant model given here answers.
    # No sandbox: think and finish start no process, and this measures the store's cost.
    settings = ConversationSettings.litellm(
        InstantThinkModel.name, folder / "workspace", tools=("think", "finish"), sandbox=NO_SANDBOX
    )
    conversation = Conversation.create(store, settings, model=InstantThinkModel())
    past = realistic_events(history)
    for start in range(0, len(past), 1000):
        store.append_batch(conversation.id, past[start : start + 1000])
    conversation.run(max_steps=3)  # warm up: caches filled as in a long-running process
    begin = time.perf_counter()
    conversation.run(max_steps=steps)
    elapsed = time.perf_counter() - begin
    conversation.close()
    store.close()
    return elapsed / steps


def run_sandbox_bench(commands: int = 200, starts: int = 10) -> dict[str, Any]:
    """The sandbox's cost to the terminal: per command (median of ``true`` in a sandboxed shell
    minus in an unsandboxed one) and to start (a conversation's first command, its shell and
    sandbox started). The two kinds alternate, so a busy machine slows both alike."""
    kinds = {"plain": SandboxSettings(kind="none"), "sandbox": SandboxSettings()}
    first: dict[str, list[float]] = {kind: [] for kind in kinds}
    each: dict[str, list[float]] = {kind: [] for kind in kinds}
    tools = ToolSet([TerminalTool()])
    with tempfile.TemporaryDirectory(prefix="treadle-bench-") as tmp:
        contexts = {}
        for kind, sandbox in kinds.items():
            settings = ConversationSettings.litellm("bench", Path(tmp) / kind, sandbox=sandbox)
            contexts[kind] = build_workspace(settings)
        try:
            for start in range(starts):
                for kind, workspace in contexts.items():
                    context = ToolContext(workspace, Secrets(), conversation_id=f"start-{start}")
                    begin = time.perf_counter()
                    tools.call("terminal", {"command": "true"}, context)
                    first[kind].append(time.perf_counter() - begin)
            running = {
                kind: ToolContext(workspace, Secrets(), conversation_id="commands")
                for kind, workspace in contexts.items()
            }
            for context in running.values():
                tools.call("terminal", {"command": "true"}, context)  # its shell started
            for _ in range(commands):
                for kind, context in running.items():
                    begin = time.perf_counter()
                    tools.call("terminal", {"command": "true"}, context)
                    each[kind].append(time.perf_counter() - begin)
        finally:
            tools.close()
    plain_s, boxed_s = statistics.median(each["plain"]), statistics.median(each["sandbox"])
    return {
        "terminal_command_s": plain_s,
        "sandbox_terminal_command_s": boxed_s,
        "sandbox_command_overhead_s": boxed_s - plain_s,
        "terminal_start_s": statistics.median(first["plain"]),
        "sandbox_start_s": statistics.median(first["sandbox"]),
    }


def run_runtime_bench(
    short: int = 100, long: int = 10_000, steps: int = 200, durability: str = "fast"
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="treadle-bench-") as tmp:
        folder = Path(tmp)
        short_s = _step_seconds(short, steps, folder, durability)
        long_s = _step_seconds(long, steps, folder, durability)
    return {
        "durability": durability,
        "steps": steps,
        "short_history_events": short,
        "long_history_events": long,
        "step_overhead_short_s": short_s,
        "step_overhead_long_s": long_s,
        "long_vs_short_ratio": long_s / short_s,
        **run_sandbox_bench(),
    }
