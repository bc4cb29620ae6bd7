"""``treadle eval run`` (an eval's tasks on Ray, resumable) and ``treadle eval report`` (a
stored eval's results again). Exit codes: 0 every task ran to a result, 1 some task could
not after its retries, 2 bad input (docs/eval.md)."""

from __future__ import annotations

import logging
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from treadle.api.ids import conversation_id_problem
from treadle.api.settings import ModelChoice, SandboxSettings
from treadle.cli.app import app
from treadle.cli.output import EXIT_BAD_INPUT, fail, print_json
from treadle.cli.store_options import StoreOption, open_store_or_exit
from treadle.errors import TreadleError
from treadle.store.base import StoreError
from treadle.store.urls import default_store_url

eval_app = typer.Typer(help="Evals: many frozen tasks run as conversations at once, on Ray.")
app.add_typer(eval_app, name="eval")

EXIT_SOME_NOT_RUN = 1


class Switch(StrEnum):
    off = "off"
    on = "on"


class SandboxChoice(StrEnum):
    bubblewrap = "bubblewrap"
    none = "none"


@eval_app.command("run")
def eval_run(
    tasks_file: Annotated[
        Path, typer.Argument(help="Task file: JSON Lines, one task a line", show_default=False)
    ],
    store: StoreOption = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="LiteLLM model for tasks that name none (or TREADLE_MODEL)"),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="OpenAI-compatible base URL for --model")
    ] = None,
    script: Annotated[
        Path | None,
        typer.Option("--script", help="A scripted model (JSON file) for tasks that name none"),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, max=512, help="Tasks run at once")
    ] = 2,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="A Ray cluster (e.g. ray://head:10001 or auto); default: a local Ray started "
            "for this eval. Needs a PostgreSQL store",
        ),
    ] = None,
    retries: Annotated[
        int,
        typer.Option("--retries", min=0, max=100, help="Tries again after a worker dies"),
    ] = 2,
    max_cost: Annotated[
        float | None,
        typer.Option("--max-cost", min=0.000001, help="Budget in USD for each task"),
    ] = None,
    task_timeout: Annotated[
        float | None,
        typer.Option(
            "--task-timeout",
            min=0.1,
            help="Seconds each task's agent may run (and its setup and verify, each)",
        ),
    ] = None,
    max_steps: Annotated[
        int, typer.Option("--max-steps", min=1, help="Model calls per task at most")
    ] = 50,
    eval_id: Annotated[
        str | None,
        typer.Option(
            "--eval-id",
            help="The eval's id (default: a digest of the task file and the model settings: "
            "the same eval run again resumes)",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the report (JSON) here")
    ] = None,
    setup_network: Annotated[
        Switch, typer.Option("--setup-network", help="Network for the tasks' setup commands")
    ] = Switch.off,
    sandbox: Annotated[
        SandboxChoice,
        typer.Option(
            "--sandbox",
            help="Where the tools, setup and verify run: bubblewrap (network off) or none",
        ),
    ] = SandboxChoice.bubblewrap,
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="Where the attempts' workspaces are made (removed after)"),
    ] = None,
) -> None:
    """Run every task of TASKS_FILE as its own conversation in a fresh workspace, on Ray;
    store each result (patch, verification, usage) beside its conversation and print the
    report. Running the same eval again skips the tasks that have a result."""
    from treadle.eval.driver import EvalPlan, model_settings, run_eval, tasks_without_model
    from treadle.eval.ray_engine import EvalEngineUnavailable, RayEngine, import_ray
    from treadle.eval.report import eval_report, print_report, report_path_problem, write_report
    from treadle.eval.results import EvalMismatch, open_eval_results
    from treadle.eval.tasks import TaskFileError, eval_id_for, read_task_file
    from treadle.eval.workspace import remove_orphans
    from treadle.runtime.workspace.base import SandboxUnavailable
    from treadle.runtime.workspace.sandbox import check_bubblewrap

    console = Console(highlight=False)
    if eval_id is not None and (problem := conversation_id_problem(eval_id, kind="eval")):
        # An eval id is a URL path segment (GET /api/evals/ID, the Canvas's #/e/ID).
        fail(problem, EXIT_BAD_INPUT)
    if output is not None and (problem := report_path_problem(output)):
        fail(problem, EXIT_BAD_INPUT)
    try:
        import_ray()
        task_file = read_task_file(tasks_file)
    except (EvalEngineUnavailable, TaskFileError) as error:
        fail(str(error), EXIT_BAD_INPUT)
    url = store or default_store_url()
    if ray_address is not None and url.startswith("sqlite"):
        fail(
            "--ray-address runs tasks on a cluster's machines, which cannot write this "
            f"machine's SQLite file ({url}): give a PostgreSQL store (--store "
            "postgresql://user@host:port/db) that every machine can reach",
            EXIT_BAD_INPUT,
        )
    choice = _model_choice(model, base_url, script)
    chosen_sandbox = SandboxSettings(kind=sandbox.value)
    if sandbox is SandboxChoice.bubblewrap:
        try:
            check_bubblewrap()
        except SandboxUnavailable as error:
            fail(str(error), EXIT_BAD_INPUT)
    plan = EvalPlan(
        eval_id=eval_id or eval_id_for(task_file, model_settings(choice)),
        task_file=task_file,
        model=choice,
        store_url=url,
        sandbox=chosen_sandbox,
        setup_network=setup_network is Switch.on,
        max_cost_usd=max_cost,
        task_timeout_s=task_timeout,
        retries=retries,
        max_steps=max_steps,
        work_dir=str(work_dir.resolve()) if work_dir else None,
    )
    missing = tasks_without_model(plan)
    if missing:
        fail(
            f"task(s) {', '.join(missing[:5])} name no model: give --model NAME (or "
            "TREADLE_MODEL) or --script FILE, or a model in each task",
            EXIT_BAD_INPUT,
        )
    logging.getLogger("treadle").addHandler(logging.NullHandler())
    logging.getLogger("treadle").propagate = False
    opened = open_store_or_exit(url)
    try:
        results = open_eval_results(url)
    except StoreError as error:
        opened.close()
        fail(str(error), EXIT_BAD_INPUT)
    try:
        with (
            _ProgressBar(len(task_file.tasks)) as (bar, tell),
            RayEngine(workers, ray_address) as engine,
        ):
            bar.update(bar.task_ids[0], description=f"eval {plan.eval_id}")
            run = run_eval(plan, engine, results, opened, tell)
    except (EvalMismatch, EvalEngineUnavailable) as error:
        fail(str(error), EXIT_BAD_INPUT)
    except TreadleError as error:
        fail(f"the eval stopped: {error}", EXIT_SOME_NOT_RUN)
    finally:
        results.close()
        opened.close()
        if ray_address is None:  # every local worker is gone: what a killed one left, too
            remove_orphans(Path(plan.work_dir or tempfile.gettempdir()))
    report = eval_report(run.record, run.tasks, run.skipped)
    if output is not None:
        try:
            write_report(output, report)
        except OSError as error:
            fail(
                f"cannot write the report to {output}: {error.strerror or error} (the results "
                f"are stored: treadle eval report {plan.eval_id} --json)",
                EXIT_SOME_NOT_RUN,
            )
    print_report(console, report)
    raise typer.Exit(EXIT_SOME_NOT_RUN if report["summary"]["not_run"] else 0)


def _model_choice(
    model: str | None, base_url: str | None, script: Path | None
) -> ModelChoice | None:
    """The eval's model (None: every task must name its own); exit 2 when both are given."""
    if script is not None and model is not None:
        fail("give --model or --script, not both", EXIT_BAD_INPUT)
    if script is not None:
        return ModelChoice(kind="scripted", script=str(script.resolve()))
    from treadle.environment import model_environment

    name = model or model_environment().model
    if name is None:
        return None
    return ModelChoice(kind="litellm", model=name, base_url=base_url)


class _ProgressBar:
    """A progress bar on stderr advanced by the driver's news of each task."""

    def __init__(self, total: int) -> None:
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[news]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.bar.add_task("eval", total=total, news="")

    def tell(self, task_id: str, what: str) -> None:
        done = what in ("result", "not_run", "skipped")
        self.bar.update(self.task, advance=1 if done else 0, news=f"{task_id}: {what}")

    def __enter__(self) -> tuple[Progress, Any]:
        self.bar.start()
        return self.bar, self.tell

    def __exit__(self, *_exc: object) -> None:
        self.bar.stop()


@eval_app.command("report")
def eval_report_command(
    eval_id: Annotated[str, typer.Argument(help="The eval's id", show_default=False)],
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Print a stored eval's results again (a table, or the report JSON with --json)."""
    from treadle.eval.report import eval_report, print_report
    from treadle.eval.results import EvalNotFound, open_eval_results

    url = store or default_store_url()
    opened = open_store_or_exit(url)
    opened.close()
    try:
        results = open_eval_results(url)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    try:
        report = eval_report(results.get_eval(eval_id), results.tasks(eval_id))
    except EvalNotFound as error:
        fail(f"{error} ({url})", EXIT_BAD_INPUT)
    finally:
        results.close()
    if as_json:
        print_json(report)
    else:
        print_report(Console(highlight=False), report)
