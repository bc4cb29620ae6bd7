"""Wire models of the server's eval routes (``GET /api/evals``, ``GET /api/evals/{id}``):
the evals a store holds, each with its summary, and one eval's tasks with their results."""

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


class EvalView(BaseModel):
    id: str
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
