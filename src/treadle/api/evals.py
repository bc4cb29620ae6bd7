"""Wire models of the server's eval routes (``GET /api/evals``, ``GET /api/evals/{id}``,
``GET /api/evals/compare``): the evals a store holds, each with its summary, one eval's tasks
with their results, and two evals compared."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class EvalSummaryView(BaseModel):
    tasks: int
    passed: int
    failed: int
    not_run: int
    pass_rate: float
    tokens: int
    cost_usd: float
    seconds: float
    samples: int = 0
    epochs: int = 1
    stderr: float = 0.0
    pass_at_k: dict[str, float] = Field(default_factory=dict)


class EvalTaskView(BaseModel):
    """One task's result (docs/eval.md): ``conversation_id`` opens its last attempt."""

    task_id: str
    status: str
    passed: bool
    conversation_id: str | None
    attempts: int
    steps: int
    tokens: int
    cost_usd: float
    seconds: float
    verify_exit_code: int | None
    reason: str | None = None
    patch: str = ""
    epoch: int = 1
    status_reason: str | None = None
    model_seconds: float = 0.0
    verify_output: str | None = None
    patch_left_out: list[str] = Field(default_factory=list)
    tests: dict[str, dict[str, str]] | None = None
    environment: dict[str, Any] | None = None


class EvalView(BaseModel):
    id: str
    model: str = "?"
    tasks_file: str
    engine: dict[str, Any]
    settings: dict[str, Any]
    created_at: str
    updated_at: str
    summary: EvalSummaryView
    tasks: list[EvalTaskView] | None = Field(
        default=None, description="The tasks in the file's order (one eval only, not a list)"
    )


class EvalList(BaseModel):
    items: list[EvalView]
    next_offset: int | None = None


class EvalComparison(BaseModel):
    """Two evals compared (docs/eval.md, ``treadle eval compare``)."""

    a: dict[str, Any]
    b: dict[str, Any]
    common_tasks: int
    only_in_a: list[str]
    only_in_b: list[str]
    paired_difference: dict[str, float]
    differences: list[dict[str, Any]]
