"""``treadle bench runtime``: Treadle's own overhead per agent step (store + projection) with
short and long histories; the model answers instantly and the tool (think) does nothing. With
condensation on (a small budget, so that the measured steps condense several times), the same
at 100 and at 10,000 events, and the condenser's own decision (no summary call) at 10,000
events under a 100,000-token budget; what the sandbox costs the terminal: per command, and
to start a conversation's shell; what one hook run costs a call (``bench/hooks.py``); and a
confined file editor call against the same file work by path (``bench/file_editor.py``); and
the server's time per live update of the Canvas at 15,000 events (``bench/live_view.py``)."""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from treadle.bench.file_editor import run_file_editor_bench
from treadle.bench.hooks import run_hook_bench
from treadle.bench.live_output import run_live_output_bench
from treadle.bench.live_view import run_live_view_bench
from treadle.bench.workload import realistic_events
from treadle.events.links import pending_actions
from treadle.events.model import CondensationEvent, Event, TokenUsage
from treadle.runtime.condense.condenser import Condenser
from treadle.runtime.condense.context import ContextView
from treadle.runtime.conversation import Conversation
from treadle.runtime.llm.base import ModelRequest, ModelResponse, ToolCall
from treadle.runtime.llm.litellm_model import litellm_token_counter
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import ConversationSettings, SandboxSettings, build_workspace
from treadle.runtime.status import ConversationStatus
from treadle.runtime.tools import TerminalTool, ToolContext, ToolSet
from treadle.store.urls import open_store

NO_SANDBOX = SandboxSettings(kind="none")


class InstantThinkModel:
    """Answers every model call at once with one ``think`` call: no model time in the figures."""

    name = "instant-think"

    def __init__(self) -> None:
        self._steps = itertools.count()

    def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            number = request.summaries_before
            return ModelResponse(id=f"bench-summary-{number}", text="the earlier steps thought")
        step = next(self._steps)
        return ModelResponse(
            id=f"bench-response-{step}",
            tool_calls=(ToolCall(f"bench-call-{step}", "think", f'{{"thought": "step {step}"}}'),),
            usage=TokenUsage(),
        )


def _step_seconds(
    history: int,
    steps: int,
    folder: Path,
    durability: str,
    context_tokens: int | None = None,
) -> tuple[float, int]:
    """Seconds per step after ``history`` events, and the condensations the steps made."""
    name = f"runtime-{history}-{context_tokens or 'whole'}.db"
    store = open_store(f"sqlite:///{folder / name}?durability={durability}")
    # The model's name is only stored; the instant model given here answers.
    # No sandbox: think and finish start no process, and this measures the store's cost.
    settings = ConversationSettings.litellm(
        InstantThinkModel.name,
        folder / "workspace",
        tools=("think", "finish"),
        condense="off" if context_tokens is None else "auto",
        context_tokens=context_tokens,
        sandbox=NO_SANDBOX,
    )
    conversation = Conversation.create(store, settings, model=InstantThinkModel())
    past = realistic_events(history)
    while pending_actions(past):  # a history cut in a batch: a run would wait for answers
        past.pop()
    for start in range(0, len(past), 1000):
        store.append_batch(conversation.id, past[start : start + 1000])
    # Warm up: caches filled as in a long-running process (a long history is condensed
    # here the first time, its events' tokens counted once).
    _steps_made(conversation, 3)
    before = _condensations(conversation)
    begin = time.perf_counter()
    _steps_made(conversation, steps)
    elapsed = time.perf_counter() - begin
    made = _condensations(conversation) - before
    conversation.close()
    store.close()
    return elapsed / steps, made


def _steps_made(conversation: Conversation, steps: int) -> None:
    """Run ``steps`` steps; an error when the run stopped before them (the figure would
    measure a run that did nothing)."""
    status = conversation.run(max_steps=steps)
    if status is not ConversationStatus.IDLE:
        raise RuntimeError(
            f"the measured run stopped before its {steps} steps: {status.value} "
            f"({conversation.status_reason})"
        )


def _condensations(conversation: Conversation) -> int:
    return sum(1 for event in conversation.active_path() if event.kind == "condensation")


def decision_seconds(events: int = 10_000, budget: int = 100_000) -> dict[str, float]:
    """The condenser's own decision at ``events`` events under ``budget`` tokens, no summary
    call: a path condensed as the runtime would have condensed it, then the median time of
    (a) a step's check (follow two new events, compare with the budget) and (b) the plan
    when the check fires (what to forget, over the whole view)."""
    condenser = Condenser(
        InstantThinkModel(), litellm_token_counter("gpt-4o"), context_tokens=budget
    )
    context = ContextView(condenser.sizes())
    path: list[Event] = []
    for event in realistic_events(events):
        path.append(event)
        context.follow(path)
        if condenser.over_budget(context):
            plan = condenser.plan(context)
            if plan is not None:
                path.append(
                    CondensationEvent(
                        forgotten_event_ids=plan.forgotten_ids,
                        summary="the earlier steps",
                        summary_offset=plan.summary_offset,
                    )
                )
                context.follow(path)
    checks: list[float] = []
    plans: list[float] = []
    tail = realistic_events(40)[-20:]
    for repeat in range(10):
        extended = [*path, *(e.model_copy(update={"id": f"{e.id}-{repeat}"}) for e in tail[:2])]
        begin = time.perf_counter()
        context.follow(extended)
        condenser.over_budget(context)
        checks.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        context.may_condense = True  # time the plan even right after a condensation
        condenser.plan(context)
        plans.append(time.perf_counter() - begin)
        context.follow(path)  # back (a rebuild: not timed)
    return {
        "decision_events": float(len(path)),
        "decision_view_items": float(len(context.view)),
        "decision_check_s": statistics.median(checks),
        "decision_plan_s": statistics.median(plans),
    }


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
    short: int = 100,
    long: int = 10_000,
    steps: int = 200,
    durability: str = "fast",
    condensed_budget: int = 4_000,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="treadle-bench-") as tmp:
        folder = Path(tmp)
        short_s, _ = _step_seconds(short, steps, folder, durability)
        long_s, _ = _step_seconds(long, steps, folder, durability)
        condensed_short_s, short_made = _step_seconds(
            short, steps, folder, durability, condensed_budget
        )
        condensed_long_s, long_made = _step_seconds(
            long, steps, folder, durability, condensed_budget
        )
    return {
        "durability": durability,
        "steps": steps,
        "short_history_events": short,
        "long_history_events": long,
        "step_overhead_short_s": short_s,
        "step_overhead_long_s": long_s,
        "long_vs_short_ratio": long_s / short_s,
        "condensed_budget_tokens": condensed_budget,
        "condensed_step_overhead_short_s": condensed_short_s,
        "condensed_step_overhead_long_s": condensed_long_s,
        "condensed_long_vs_short_ratio": condensed_long_s / condensed_short_s,
        "condensations_in_steps_short": short_made,
        "condensations_in_steps_long": long_made,
        **decision_seconds(long, 100_000),
        **run_sandbox_bench(),
        **run_live_output_bench(),
        **run_hook_bench(),
        **run_file_editor_bench(),
        **run_live_view_bench(),
    }
