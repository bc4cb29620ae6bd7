"""``treadle bench runtime``: Treadle's own overhead per agent step (store + projection) with
short and long histories; the model answers instantly and the tool (think) does nothing."""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from treadle.bench.workload import realistic_events
from treadle.events.model import TokenUsage
from treadle.runtime.conversation import Conversation
from treadle.runtime.llm.base import ModelResponse, ToolCall
from treadle.runtime.settings import ConversationSettings
from treadle.store.urls import open_store


class InstantThinkModel:
    """Answers every model call at once with one ``think`` call: no model time in the figures."""

    name = "instant-think"

    def __init__(self) -> None:
        self._steps = itertools.count()

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        turn: int | None = None,
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
    settings = ConversationSettings.litellm(
        InstantThinkModel.name, folder / "workspace", tools=("think", "finish")
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
    }
