"""One attempt at one task, as a worker runs it: a fresh workspace, the task's setup, the
conversation with the real runtime (sandboxed), the patch and the verification.

``run_task_attempt`` is a plain function of picklable data (``TaskJob``), so that any engine
(Ray's workers, or this process in tests) can run it; it returns the task's result (a
``TaskResult``) and never records the outcome of the attempt itself: the eval's driver does,
once, so that a worker that dies after finishing is never counted twice.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treadle.data.settings import (
    ConversationSettings,
    ModelChoice,
    SandboxSettings,
)
from treadle.environment import model_environment, shell_environment
from treadle.eval.commands import CommandResult, run_task_command
from treadle.eval.environment import worker_environment
from treadle.eval.prices import priced
from treadle.eval.scoring import Score, score_attempt
from treadle.eval.tasks import EvalTask
from treadle.eval.workspace import (
    AttemptFolder,
    collect_patch,
    folder_commit,
    make_attempt_folder,
    record_baseline,
    snapshot_settings,
    starting_tree_id,
)
from treadle.events.model import ActionEvent, MessageEvent
from treadle.runtime.conversation import Conversation
from treadle.runtime.llm.base import LanguageModel, close_model
from treadle.runtime.settings import HostProvides, SettingsPolicy, build_model
from treadle.store.base import EventStore
from treadle.store.lease_holder import HeldLease
from treadle.store.leases import CLI, new_owner, open_leases
from treadle.store.urls import open_store

EVAL_METADATA_KEY = "eval"
"""Where a task conversation's metadata names its eval, task, attempt and worker."""
DEFAULT_COMMAND_TIMEOUT_S = 600.0
"""The time limit of setup and verify when the eval sets no --task-timeout."""


@dataclass(frozen=True)
class TaskJob:
    """Everything a worker needs for one attempt (picklable: it travels to Ray's workers)."""

    eval_id: str
    task: EvalTask
    attempt: int
    conversation_id: str
    store_url: str
    model: ModelChoice
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    setup_network: bool = False
    max_cost_usd: float | None = None
    task_timeout_s: float | None = None
    max_steps: int = 50
    work_dir: str | None = None
    """Where attempt folders are made (default: the system's temporary folder)."""
    model_delay_s: float = 0.0
    """For benchmarks: every model call takes this long more (a provider's latency)."""
    epoch: int = 1
    """Which of the eval's repeats of the task this attempt is (``--epochs``)."""
    environment: dict[str, Any] = field(default_factory=dict)
    """What the result records of what it ran with (environment.run_settings and the task's
    sources); the worker adds its machine's part (environment.worker_environment)."""
    prices: tuple[float, float] | None = None
    """USD per million input and output tokens, for a model LiteLLM cannot price."""
    snapshots: bool = True
    """Workspace snapshots in the conversation (treadle diff, replay --mode rerun)."""


@dataclass
class TaskResult:
    """A task's result as the report shows it (``to_json``), before the eval adds the number
    of attempts and whether a rerun skipped it."""

    task_id: str
    status: str
    """The conversation's final status (finished, error, stuck, paused, idle), or timeout,
    setup_failed, workspace_failed (the run never started), or not_run (no result)."""
    passed: bool
    patch: str
    verify: dict[str, Any] | None
    conversation_id: str | None
    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    model_seconds: float = 0.0
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "status": self.status,
            "passed": self.passed,
            "patch": self.patch,
            "verify": self.verify,
            "conversation_id": self.conversation_id,
            "steps": self.steps,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "seconds": round(self.seconds, 3),
            "model_seconds": round(self.model_seconds, 3),
            "reason": self.reason,
            **self.extra,
        }


def run_task_attempt(job: TaskJob) -> dict[str, Any]:
    """Run one attempt of ``job.task`` to a result (``TaskResult.to_json()``). Failures of the
    task itself (its setup, its model, its verification) are results; an exception means the
    attempt could not run (its store, or the sandbox, is unavailable)."""
    started = time.monotonic()
    task = job.task
    timeout = job.task_timeout_s or DEFAULT_COMMAND_TIMEOUT_S
    folder = make_attempt_folder(
        task, Path(job.work_dir) if job.work_dir else None, sandbox=job.sandbox
    )
    try:
        if task.setup is not None:
            network = "on" if job.setup_network else "off"
            setup_sandbox = job.sandbox.model_copy(update={"network": network})
            setup = run_task_command(
                folder.workspace, task.setup, setup_sandbox, timeout_s=timeout,
                environment=shell_environment(),
            )  # fmt: skip
            if setup.exit_code != 0:
                return _setup_failed(task, setup, time.monotonic() - started).to_json()
        record_baseline(folder)
        clock = ModelClock(job.model_delay_s, job.prices)
        status, status_reason = _converse(job, folder, clock)
        patch = collect_patch(folder)
        score = score_attempt(
            folder, task, patch, job.sandbox, timeout_s=timeout,
            environment=shell_environment(),
        )  # fmt: skip
        passed, reason = verdict(status, status_reason, score)
        result = TaskResult(
            task_id=task.id,
            status=status,
            passed=passed,
            patch=patch.text,
            verify=None if score.verify is None else score.verify.to_json(),
            conversation_id=job.conversation_id,
            reason=reason,
            model_seconds=clock.seconds,
            extra={
                "status_reason": status_reason,
                "patch_left_out": list(patch.left_out),
                "scoring": score.details,
                "tests": score.tests,
                "epoch": job.epoch,
                "environment": {
                    **job.environment,
                    **worker_environment(job.sandbox),
                    "starting_tree": starting_tree_id(folder),
                    "commit": folder_commit(folder) if task.repo is not None else None,
                },
            },
        )
        _add_usage(result, worker_store(job.store_url), job.conversation_id)
        result.seconds = time.monotonic() - started
        return result.to_json()
    finally:
        folder.remove()


def verdict(status: str, status_reason: str | None, score: Score) -> tuple[bool, str | None]:
    """Whether the attempt passed and why not: only a ``finished`` conversation can pass (a
    timeout, a budget's pause, an idle or stuck agent, an error is a failure whatever its files
    do); then the clean checkout's score decides."""
    if status != "finished":
        said = f": {status_reason}" if status_reason else ""
        return False, f"the conversation ended {status}{said} (only a finished one can pass)"
    if not score.passed:
        return False, score.reason
    return True, status_reason


def _setup_failed(task: EvalTask, setup: CommandResult, seconds: float) -> TaskResult:
    return TaskResult(
        task_id=task.id,
        status="setup_failed",
        passed=False,
        patch="",
        verify=None,
        conversation_id=None,
        seconds=seconds,
        reason=f"setup exited {setup.exit_code}: {setup.output_tail[-500:]}",
    )


def _converse(job: TaskJob, folder: AttemptFolder, clock: ModelClock) -> tuple[str, str | None]:
    """Run the task's conversation to its end; (status, reason)."""
    store = worker_store(job.store_url)
    settings = ConversationSettings(
        model=job.task.model or job.model,
        workspace=str(folder.workspace),
        sandbox=job.sandbox,
        # Snapshots make the trajectory diffable and rerunnable (treadle diff, replay --mode
        # rerun); bounded per file as any conversation's, by the starting files' ignore rules.
        snapshots=snapshot_settings(folder, enabled=job.snapshots),
        max_cost_usd=job.max_cost_usd,
    )
    policy = SettingsPolicy(
        provides=HostProvides(
            model_environment=model_environment(), shell_environment=shell_environment()
        )
    )
    model = clock.attach(build_model(settings.model, policy))
    try:
        return _converse_with(job, store, settings, policy, model)
    finally:
        close_model(model)  # built here for this attempt: a worker runs many


def _converse_with(
    job: TaskJob,
    store: EventStore,
    settings: ConversationSettings,
    policy: SettingsPolicy,
    model: LanguageModel,
) -> tuple[str, str | None]:
    conversation = Conversation.create(
        store,
        settings,
        id=job.conversation_id,
        title=f"{job.eval_id} · {job.task.id}",
        model=model,
        policy=policy,
        model_key=model_environment().api_key,
    )
    metadata = dict(store.get_conversation(conversation.id).metadata)
    metadata[EVAL_METADATA_KEY] = {
        "eval": job.eval_id,
        "task": job.task.id,
        "attempt": job.attempt,
        "worker": f"{socket.gethostname()}:{os.getpid()}",
    }
    store.update_conversation(conversation.id, metadata=metadata)
    timed_out = threading.Event()

    def stop_for_time() -> None:
        timed_out.set()
        conversation.interrupt()

    timer = threading.Timer(job.task_timeout_s or 0, stop_for_time)
    timer.daemon = True
    # Like `treadle run`, the attempt holds the conversation's run lease: a server shows it
    # running (and never runs it too); if this worker dies, the lease expires and every
    # reader sees the run as interrupted.
    lease = HeldLease(
        open_leases(store.url), conversation.id, new_owner(CLI), on_lost=conversation.pause
    )
    with conversation:
        try:
            with lease:
                conversation.send_message(job.task.instruction)
                if job.task_timeout_s is not None:
                    timer.start()
                try:
                    status = conversation.run(job.max_steps)
                finally:
                    timer.cancel()
        finally:
            lease.leases.close()
        if timed_out.is_set():
            return "timeout", f"stopped after --task-timeout {job.task_timeout_s:g} s"
        return status.value, conversation.status_reason


def _add_usage(result: TaskResult, store: EventStore, conversation_id: str) -> None:
    """Steps (model responses on the active path), tokens and cost (every model call)."""
    info = store.get_conversation(conversation_id)
    result.tokens = info.prompt_tokens + info.completion_tokens
    result.cost_usd = info.cost_usd
    path = store.path_to_root(conversation_id)
    responses = {
        event.llm_response_id or event.id
        for event in path
        if isinstance(event, ActionEvent) and event.usage is not None
    }
    agent_messages = sum(
        1 for event in path if isinstance(event, MessageEvent) and event.source == "agent"
    )
    result.steps = len(responses) + agent_messages


class ModelClock:
    """Counts the seconds a model spends answering (``attach`` times its calls in place, so
    the runtime still sees the model's own class), plus an optional added delay; with
    ``prices``, a response LiteLLM could not price is priced by its tokens (so that a budget
    holds)."""

    def __init__(self, delay_s: float = 0.0, prices: tuple[float, float] | None = None) -> None:
        self.delay_s = delay_s
        self.prices = prices
        self.seconds = 0.0

    def attach(self, model: LanguageModel) -> LanguageModel:
        model.complete = self._timed(model.complete)  # type: ignore[method-assign]  # per instance
        return model

    def _timed(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                if self.delay_s:
                    time.sleep(self.delay_s)
                response = call(*args, **kwargs)
                return priced(response, self.prices) if self.prices else response
            finally:
                self.seconds += time.monotonic() - started

        return timed


_STORES: dict[str, EventStore] = {}
_STORES_LOCK = threading.Lock()


def worker_store(url: str) -> EventStore:
    """The store at ``url``, opened once per worker process (a worker runs many attempts) and
    closed when the process exits."""
    with _STORES_LOCK:
        store = _STORES.get(url)
        if store is None:
            store = _STORES[url] = open_store(url)
        return store


@atexit.register
def _close_worker_stores() -> None:
    with _STORES_LOCK:
        for store in _STORES.values():
            with contextlib.suppress(Exception):
                store.close()
        _STORES.clear()
