"""REST routes for evals, read-only: the evals the store holds (newest first), one eval's
tasks (each naming the conversation of its last attempt, with its patch and verify output),
and two evals compared (docs/eval.md)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from treadle.api.evals import (
    EvalComparison,
    EvalList,
    EvalSummaryView,
    EvalTaskView,
    EvalView,
)
from treadle.eval.compare import compare_reports
from treadle.eval.report import eval_report
from treadle.eval.results import EvalNotFound, EvalResults
from treadle.server.errors import ApiError
from treadle.server.state import ServerState, server_state
from treadle.store.eval_results import open_eval_results

router = APIRouter(prefix="/api/evals", tags=["evals"])
State = Annotated[ServerState, Depends(server_state)]


@contextmanager
def _results(state: ServerState) -> Iterator[EvalResults]:
    """The store's eval tables, for one request (a connection of its own, closed after)."""
    results = open_eval_results(state.store.url)
    try:
        yield results
    finally:
        results.close()


def _view(report: dict[str, Any], created_at: str, updated_at: str, *, tasks: bool) -> EvalView:
    return EvalView(
        id=report["eval_id"],
        model=report["model"],
        tasks_file=report["tasks_file"],
        engine=report["engine"],
        settings=report["settings"],
        created_at=created_at,
        updated_at=updated_at,
        summary=EvalSummaryView(**report["summary"]),
        tasks=[_task(result) for result in report["results"]] if tasks else None,
    )


def _task(result: dict[str, Any]) -> EvalTaskView:
    verify = result.get("verify")
    return EvalTaskView(
        task_id=result["task_id"],
        status=result["status"],
        passed=result["passed"],
        conversation_id=result["conversation_id"],
        attempts=result.get("attempts", 0),
        steps=result["steps"],
        tokens=result["tokens"],
        cost_usd=result["cost_usd"],
        seconds=result["seconds"],
        verify_exit_code=None if verify is None else verify["exit_code"],
        reason=result.get("reason"),
        patch=result["patch"],
        epoch=result.get("epoch", 1),
        status_reason=result.get("status_reason"),
        model_seconds=result.get("model_seconds", 0.0),
        verify_output=None if verify is None else verify.get("output_tail"),
        patch_left_out=result.get("patch_left_out") or [],
        tests=result.get("tests"),
        environment=result.get("environment"),
    )


@router.get("", response_model=EvalList)
def list_evals(
    state: State,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> EvalList:
    with _results(state) as results:
        records = results.list_evals(limit=limit + 1, offset=offset)
        items = [
            _view(
                eval_report(record, results.tasks(record.id)),
                record.created_at,
                record.updated_at,
                tasks=False,
            )
            for record in records[:limit]
        ]
    return EvalList(items=items, next_offset=offset + limit if len(records) > limit else None)


@router.get("/compare", response_model=EvalComparison)
def compare_evals(
    state: State,
    a: Annotated[str, Query(min_length=1, max_length=128)],
    b: Annotated[str, Query(min_length=1, max_length=128)],
) -> EvalComparison:
    """Eval ``a`` and eval ``b`` side by side (declared before ``/{eval_id}``, which would
    take ``compare`` for an id)."""
    with _results(state) as results:
        try:
            reports = [eval_report(results.get_eval(one), results.tasks(one)) for one in (a, b)]
        except EvalNotFound as error:
            raise ApiError(404, "eval_not_found", str(error)) from None
    return EvalComparison(**compare_reports(*reports))


@router.get("/{eval_id}", response_model=EvalView)
def get_eval(eval_id: str, state: State) -> EvalView:
    with _results(state) as results:
        try:
            record = results.get_eval(eval_id)
        except EvalNotFound as error:
            raise ApiError(404, "eval_not_found", str(error)) from None
        report = eval_report(record, results.tasks(eval_id))
    return _view(report, record.created_at, record.updated_at, tasks=True)
