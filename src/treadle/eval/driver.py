"""The eval's driver: which tasks still need a result, handing attempts to an engine N at a
time, and recording each attempt's outcome once (in the eval tables, and as an
``eval_attempt`` fact in the attempt's conversation).

An attempt whose worker died (or that raised) is marked in its half-finished conversation,
never counted as a result, and tried again in a fresh workspace and a new conversation up to
``retries`` more times in this run; then the task is ``not_run``. A task found ``running``
when a run starts was left by a driver that died: it is marked ``abandoned`` and tried again.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from treadle.data.settings import ModelChoice, SandboxSettings
from treadle.eval.environment import run_settings
from treadle.eval.ray_engine import AttemptDone
from treadle.eval.results import EvalRecord, EvalResults, TaskRecord, begin_eval, now_text
from treadle.eval.runner import TaskJob
from treadle.eval.tasks import EvalTask, TaskFile
from treadle.events.fact_keys import EVAL_ATTEMPT_KEY as EVAL_ATTEMPT_KEY
from treadle.events.facts import check_fact
from treadle.events.model import ROOT, StateChangeEvent
from treadle.store.base import ConversationNotFound, EventStore


class Engine(Protocol):
    @property
    def description(self) -> dict[str, Any]: ...
    @property
    def idle_slots(self) -> int: ...
    def submit(self, job: TaskJob) -> None: ...
    def wait(self, timeout_s: float = 1.0) -> list[AttemptDone]: ...


@dataclass(frozen=True)
class EvalPlan:
    """What ``treadle eval run`` was asked: the tasks and how to run each."""

    eval_id: str
    task_file: TaskFile
    model: ModelChoice | None
    store_url: str
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    setup_network: bool = False
    max_cost_usd: float | None = None
    task_timeout_s: float | None = None
    retries: int = 2
    max_steps: int = 50
    work_dir: str | None = None
    model_delay_s: float = 0.0
    epochs: int = 1
    """How many times each task is run (``--epochs``): part of a run, not of the eval's id."""
    inputs_sha256: str = ""
    """The digest of the task file and the files it names (environment.inputs_digest)."""
    sources: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each task's sources as recorded in its results (starting files' digest, commit...)."""
    prices: tuple[float, float] | None = None
    """USD per million input and output tokens, for a model LiteLLM cannot price."""
    snapshots: bool = True
    """Workspace snapshots in the task conversations (``treadle diff``, ``replay --mode rerun``)."""

    def job(self, task: EvalTask, attempt: int, conversation_id: str, epoch: int = 1) -> TaskJob:
        model = task.model or self.model
        assert model is not None  # checked when the plan is made (``tasks_without_model``)
        settings = run_settings(
            model,
            max_steps=self.max_steps,
            max_cost_usd=self.max_cost_usd,
            task_timeout_s=self.task_timeout_s,
            prices=self.prices,
        )
        return TaskJob(
            eval_id=self.eval_id,
            task=task,
            attempt=attempt,
            conversation_id=conversation_id,
            store_url=self.store_url,
            model=model,
            sandbox=self.sandbox,
            setup_network=self.setup_network,
            max_cost_usd=self.max_cost_usd,
            task_timeout_s=self.task_timeout_s,
            max_steps=self.max_steps,
            work_dir=self.work_dir,
            model_delay_s=self.model_delay_s,
            epoch=epoch,
            environment={**settings, **self.sources.get(task.id, {})},
            prices=self.prices,
            snapshots=self.snapshots,
        )


def model_settings(model: ModelChoice | None) -> dict[str, Any]:
    """The eval's model settings as stored and hashed into its default id."""
    return {"model": None if model is None else model.model_dump(mode="json", exclude_none=True)}


def tasks_without_model(plan: EvalPlan) -> list[str]:
    return [task.id for task in plan.task_file.tasks if task.model is None and plan.model is None]


@dataclass
class EvalRun:
    """The outcome of one ``run_eval``: every task's record, in the file's order, and the
    ids of those this run found finished (skipped)."""

    record: EvalRecord
    tasks: list[TaskRecord]
    skipped: set[str] = field(default_factory=set)


Progress = Callable[[str, str], None]
"""Told (task id, what happened: started, passed, failed, retry, not_run, skipped)."""


def run_eval(
    plan: EvalPlan,
    engine: Engine,
    results: EvalResults,
    store: EventStore,
    progress: Progress | None = None,
) -> EvalRun:
    """Run every task of ``plan`` that has no result yet; see the module docstring."""
    tell = progress or (lambda _task, _what: None)
    record = begin_eval(
        results,
        EvalRecord(
            id=plan.eval_id,
            tasks_file=str(plan.task_file.path),
            tasks_sha256=plan.task_file.sha256,
            settings=model_settings(plan.model),
            engine=engine.description,
            task_ids=tuple(task.id for task in plan.task_file.tasks),
            created_at=now_text(),
            updated_at=now_text(),
            inputs_sha256=plan.inputs_sha256,
        ),
    )
    stored = {(row.task_id, row.epoch): row for row in results.tasks(plan.eval_id)}
    to_run: deque[tuple[int, EvalTask, int]] = deque()
    skipped: set[str] = set()
    for epoch in range(1, plan.epochs + 1):
        for position, task in enumerate(plan.task_file.tasks):
            row = stored.get((task.id, epoch))
            if row is not None and row.state == "done":
                skipped.add(sample_key(task.id, epoch))
                tell(task.id, "skipped")
                continue
            if row is not None and row.state == "running" and row.conversation_id:
                # The driver that handed it out died: its attempt will never report.
                _mark_attempt(
                    store, plan.eval_id, task.id, row.attempts, row.conversation_id, "abandoned"
                )
            to_run.append((position, task, epoch))
    tries: dict[tuple[str, int], int] = {}
    running: dict[tuple[str, int], int] = {}
    while to_run or running:
        while to_run and engine.idle_slots > 0:
            position, task, epoch = to_run.popleft()
            conversation_id = uuid.uuid4().hex
            attempt = results.start_attempt(plan.eval_id, task.id, position, conversation_id, epoch)
            key = (task.id, epoch)
            tries[key] = tries.get(key, 0) + 1
            running[key] = position
            engine.submit(plan.job(task, attempt, conversation_id, epoch))
            tell(task.id, "started")
        for done in engine.wait(timeout_s=0.5):
            task = done.job.task
            epoch = done.job.epoch
            position = running.pop((task.id, epoch))
            _mark_attempt(
                store, plan.eval_id, task.id, done.job.attempt, done.job.conversation_id,
                done.outcome, done.error,
            )  # fmt: skip
            if done.result is not None:
                result = {**done.result, "attempts": done.job.attempt, "skipped": False}
                results.finish(plan.eval_id, task.id, result, epoch)
                tell(task.id, "passed" if result.get("passed") else "failed")
            elif tries[task.id, epoch] <= plan.retries:
                to_run.append((position, task, epoch))
                tell(task.id, "retry")
            else:
                results.give_up(plan.eval_id, task.id, _not_run(done), epoch)
                tell(task.id, "not_run")
    return EvalRun(record, results.tasks(plan.eval_id), skipped)


def _not_run(done: AttemptDone) -> dict[str, Any]:
    return {
        "task_id": done.job.task.id,
        "status": "not_run",
        "passed": False,
        "patch": "",
        "verify": None,
        "conversation_id": done.job.conversation_id,
        "steps": 0,
        "tokens": 0,
        "cost_usd": 0.0,
        "seconds": 0.0,
        "model_seconds": 0.0,
        "reason": f"no result after {done.job.attempt} attempt(s): {done.outcome}"
        + (f" ({done.error})" if done.error else ""),
        "attempts": done.job.attempt,
        "skipped": False,
        "epoch": done.job.epoch,
    }


def sample_key(task_id: str, epoch: int) -> str:
    """How a run names one of a task's epochs (its ``skipped`` set): the task id for the
    first, ``ID#K`` for the K-th."""
    return task_id if epoch == 1 else f"{task_id}#{epoch}"


def _mark_attempt(
    store: EventStore,
    eval_id: str,
    task_id: str,
    attempt: int,
    conversation_id: str,
    outcome: str,
    error: str | None = None,
) -> None:
    """Record the attempt's outcome in its conversation (when the attempt got that far: a
    worker may die, or a setup fail, before the conversation is made), with why it gave no
    result when it did not (``error``)."""
    try:
        head = store.get_conversation(conversation_id).head_id
    except ConversationNotFound:
        return
    fact: dict[str, Any] = {"eval": eval_id, "task": task_id, "attempt": attempt}
    fact["outcome"] = outcome
    if error:
        fact["error"] = error[:2000]
    check_fact(EVAL_ATTEMPT_KEY, fact)
    store.append(
        conversation_id,
        StateChangeEvent(key=EVAL_ATTEMPT_KEY, value=fact, parent_id=head or ROOT),
        move_head=False,
    )
