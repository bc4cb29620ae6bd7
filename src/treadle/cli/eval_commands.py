"""``treadle eval run`` (an eval's tasks on Ray, resumable) and ``treadle eval report`` (a
stored eval's results again). Exit codes: 0 every task ran to a result, 1 some task could
not after its retries, 2 bad input (docs/eval.md)."""

from __future__ import annotations

import logging
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from treadle.cli.model_checks import check_model, key_from_file
from treadle.cli.output import EXIT_BAD_INPUT, fail, print_json
from treadle.cli.root import app, command_group
from treadle.cli.store_options import StoreOption, open_store_or_exit
from treadle.errors import TreadleError

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from rich.progress import Progress

    from treadle.data.settings import ModelChoice

eval_app = command_group(help="Evals: many frozen tasks run as conversations at once, on Ray.")
app.add_typer(eval_app, name="eval")

EXIT_SOME_NOT_RUN = 1


class Switch(StrEnum):
    off = "off"
    on = "on"


class TaskFormat(StrEnum):
    treadle = "treadle"
    swebench = "swebench"


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
            help="The eval's id (default: a digest of the task file, the model settings and "
            "every task's inputs: starting files, hidden files, resolved commits; the same "
            "eval run again resumes)",
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
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file",
            help="File holding the model's API key (else TREADLE_API_KEY); kept out of argv",
        ),
    ] = None,
    epochs: Annotated[
        int,
        typer.Option(
            "--epochs",
            min=1,
            max=1000,
            help="Run each task K times (pass@1 is the mean; part of the run, not of the "
            "eval id: a larger K later adds attempts)",
        ),
    ] = 1,
    price_per_mtok: Annotated[
        str | None,
        typer.Option(
            "--price-per-mtok",
            help="IN,OUT: USD per million input and output tokens, for a model LiteLLM cannot "
            "price (or TREADLE_PRICE_PER_MTOK)",
        ),
    ] = None,
    task_format: Annotated[
        TaskFormat,
        typer.Option("--format", help="The task file's shape: treadle's, or SWE-bench's"),
    ] = TaskFormat.treadle,
    repos: Annotated[
        Path | None,
        typer.Option(
            "--repos", help="--format swebench: a folder of local clones, OWNER/NAME each"
        ),
    ] = None,
    test_command: Annotated[
        str,
        typer.Option("--test-command", help="--format swebench: the pytest-style test runner"),
    ] = "python -m pytest",
    snapshots: Annotated[
        Switch,
        typer.Option(
            "--snapshots",
            help="Workspace snapshots in the task conversations (treadle diff, replay --mode "
            "rerun)",
        ),
    ] = Switch.on,
) -> None:
    """Run every task of TASKS_FILE as its own conversation in a fresh workspace, on Ray;
    store each result (patch, verification, usage) beside its conversation and print the
    report. Running the same eval again skips the tasks that have a result."""
    from treadle.data.ids import conversation_id_problem
    from treadle.data.settings import SandboxSettings
    from treadle.eval.driver import EvalPlan, model_settings, run_eval, tasks_without_model
    from treadle.eval.environment import inputs_digest
    from treadle.eval.prices import PriceError, prices_from_settings
    from treadle.eval.ray_engine import EvalEngineUnavailable, RayEngine, import_ray
    from treadle.eval.report import eval_report, print_report, report_path_problem, write_report
    from treadle.eval.results import EvalMismatch
    from treadle.eval.swebench import read_swebench_file
    from treadle.eval.tasks import TaskFileError, eval_id_for, read_task_file
    from treadle.eval.workspace import remove_orphans
    from treadle.runtime.workspace.base import SandboxUnavailable
    from treadle.runtime.workspace.sandbox import check_bubblewrap
    from treadle.store.base import StoreError
    from treadle.store.eval_results import open_eval_results
    from treadle.store.urls import default_store_url

    console = Console(highlight=False)
    key_from_file(api_key_file)  # into TREADLE_API_KEY, which the workers read
    if eval_id is not None and (problem := conversation_id_problem(eval_id, kind="eval")):
        # An eval id is a URL path segment (GET /api/evals/ID, the Canvas's #/e/ID).
        fail(problem, EXIT_BAD_INPUT)
    if eval_id == "compare":  # GET /api/evals/compare is the comparison of two evals
        fail("eval id 'compare' is reserved (GET /api/evals/compare): give another", EXIT_BAD_INPUT)
    if output is not None and (problem := report_path_problem(output)):
        fail(problem, EXIT_BAD_INPUT)
    try:
        import_ray()
        if task_format is TaskFormat.swebench:
            task_file = read_swebench_file(tasks_file, repos, test_command)
        else:
            if repos is not None:
                fail("--repos applies to --format swebench only", EXIT_BAD_INPUT)
            task_file = read_task_file(tasks_file)
        inputs_sha256, sources = inputs_digest(task_file)
        prices = prices_from_settings(price_per_mtok)
    except (EvalEngineUnavailable, TaskFileError, PriceError) as error:
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
    if max_cost is not None and prices is None:
        unpriced = _unpriced_models(task_file, choice)
        if unpriced:
            fail(
                f"--max-cost {max_cost:g} cannot hold: LiteLLM has no price for "
                f"{', '.join(unpriced[:5])} (its cost would read 0 and the budget never "
                "trigger); give --price-per-mtok IN,OUT (USD per million input and output "
                "tokens) or TREADLE_PRICE_PER_MTOK",
                EXIT_BAD_INPUT,
            )
    plan = EvalPlan(
        eval_id=eval_id or eval_id_for(task_file, model_settings(choice), inputs_sha256),
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
        epochs=epochs,
        inputs_sha256=inputs_sha256,
        sources=sources,
        prices=prices,
        snapshots=snapshots is Switch.on,
    )
    missing = tasks_without_model(plan)
    if missing:
        fail(
            f"task(s) {', '.join(missing[:5])} name no model: give --model NAME (or "
            "TREADLE_MODEL) or --script FILE, or a model in each task",
            EXIT_BAD_INPUT,
        )
    _check_models(task_file, choice)  # a misspelt model, a missing key: before Ray or a task
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
            _ProgressBar(len(task_file.tasks) * epochs) as (bar, tell),
            RayEngine(workers, ray_address, log_handler=_bar_log_handler(bar)) as engine,
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
    print_report(console, report, _short_conversation_ids(url, report))
    raise typer.Exit(EXIT_SOME_NOT_RUN if report["summary"]["not_run"] else 0)


def _check_models(task_file: Any, choice: ModelChoice | None) -> None:
    """``treadle run``'s check of each LiteLLM model the eval uses (exit 2 naming a misspelt
    one or a missing key), as the workers will resolve it: its base URL or
    TREADLE_BASE_URL, the key of TREADLE_API_KEY."""
    from treadle.environment import model_environment

    environment = model_environment()
    seen: set[tuple[str, str | None]] = set()
    for model in [choice, *(task.model for task in task_file.tasks)]:
        if model is None or model.kind != "litellm" or not model.model:
            continue
        if (model.model, model.base_url) not in seen:
            seen.add((model.model, model.base_url))
            check_model(model.model, model.base_url or environment.base_url, environment.api_key)


def _unpriced_models(task_file: Any, choice: ModelChoice | None) -> list[str]:
    """The LiteLLM models of the eval LiteLLM cannot price (a scripted model costs nothing)."""
    from treadle.eval.prices import litellm_can_price

    names = {
        model.model
        for model in [choice, *(task.model for task in task_file.tasks)]
        if model is not None and model.kind == "litellm" and model.model
    }
    return sorted(name for name in names if not litellm_can_price(name))


def _model_choice(
    model: str | None, base_url: str | None, script: Path | None
) -> ModelChoice | None:
    """The eval's model (None: every task must name its own); exit 2 when both are given."""
    from treadle.data.settings import ModelChoice

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
    """A progress bar on stderr advanced by the driver's news of each task: done of all,
    passed so far, time spent and left, the latest news (first: Ray starting)."""

    def __init__(self, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[passed]} passed"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[news]}"),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.bar.add_task("eval", total=total, passed=0, news="starting Ray")
        self.passed = 0

    def tell(self, task_id: str, what: str) -> None:
        done = what in DONE_NEWS
        self.passed += what == "passed"
        self.bar.update(
            self.task, advance=1 if done else 0, passed=self.passed, news=f"{task_id}: {what}"
        )

    def __enter__(self) -> tuple[Progress, Any]:
        self.bar.start()
        return self.bar, self.tell

    def __exit__(self, *_exc: object) -> None:
        self.bar.stop()


def _bar_log_handler(bar: Progress) -> logging.Handler:
    """Log records printed above ``bar`` (rich keeps the bar whole below them)."""
    from rich.logging import RichHandler

    return RichHandler(console=bar.console, show_time=False, show_path=False)


DONE_NEWS = ("passed", "failed", "not_run", "skipped")
"""The driver's news that ends a task's attempt (eval.driver.Progress)."""


@eval_app.command("report")
def eval_report_command(
    eval_id: Annotated[
        str,
        typer.Argument(
            help="The eval's id or a unique prefix ('eval-' not counted)", show_default=False
        ),
    ],
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Print a stored eval's results again (a table, or the report JSON with --json)."""
    from treadle.eval.report import eval_report, print_report
    from treadle.eval.results import EvalNotFound
    from treadle.store.base import StoreError
    from treadle.store.eval_results import open_eval_results
    from treadle.store.urls import default_store_url

    url = store or default_store_url()
    opened = open_store_or_exit(url)
    opened.close()
    try:
        results = open_eval_results(url)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    try:
        eval_id = _resolve_eval(results, eval_id, url)
        report = eval_report(results.get_eval(eval_id), results.tasks(eval_id))
    except EvalNotFound as error:
        fail(f"{error} ({url})", EXIT_BAD_INPUT)
    finally:
        results.close()
    if as_json:
        print_json(report)
    else:
        print_report(Console(highlight=False), report, _short_conversation_ids(url, report))


def _short_conversation_ids(url: str, report: dict[str, Any]) -> dict[str, str]:
    """The report's conversation ids as their short prefixes, unique in the store (what
    ``treadle log`` and the others take); none when the store cannot be read now."""
    from treadle.cli.ids import conversation_ids, short_ids
    from treadle.store.base import StoreError
    from treadle.store.urls import open_store

    ids = [r["conversation_id"] for r in report["results"] if r.get("conversation_id")]
    try:
        opened = open_store(url)
    except StoreError:
        return {}
    try:
        return short_ids(ids, conversation_ids(opened))
    except StoreError:
        return {}
    finally:
        opened.close()


def _resolve_eval(results: Any, text: str, url: str) -> str:
    """The stored eval ``text`` names: its id, or a unique prefix (cli/ids.py's rules)."""
    from treadle.cli.ids import resolve
    from treadle.eval.results import EvalNotFound

    try:
        results.get_eval(text)
        return text
    except EvalNotFound:
        pass
    ids: list[str] = []
    while page := results.list_evals(limit=500, offset=len(ids)):
        ids += [record.id for record in page]
        if len(page) < 500:
            break
    return resolve(text, ids, "eval", url)


def _stored_reports(url: str, eval_ids: list[str]) -> list[dict[str, Any]]:
    """The reports of the stored evals ``eval_ids`` (exit 2 naming one that is not there)."""
    from treadle.eval.report import eval_report
    from treadle.eval.results import EvalNotFound
    from treadle.store.base import StoreError
    from treadle.store.eval_results import open_eval_results

    open_store_or_exit(url).close()
    try:
        results = open_eval_results(url)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    try:
        found = [_resolve_eval(results, one, url) for one in eval_ids]  # ids or prefixes
        return [eval_report(results.get_eval(one), results.tasks(one)) for one in found]
    except EvalNotFound as error:
        fail(f"{error} ({url}): treadle eval list shows the stored evals", EXIT_BAD_INPUT)
    finally:
        results.close()


@eval_app.command("list")
def eval_list_command(
    store: StoreOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON")] = False,
) -> None:
    """The store's evals, newest first: model, tasks, pass rate ± standard error, cost."""
    from treadle.eval.report import eval_report
    from treadle.store.base import StoreError
    from treadle.store.eval_results import open_eval_results
    from treadle.store.urls import default_store_url

    url = store or default_store_url()
    open_store_or_exit(url).close()
    try:
        results = open_eval_results(url)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    try:
        items = []
        for record in results.list_evals(limit=limit):
            report = eval_report(record, results.tasks(record.id))
            items.append(
                {
                    "eval_id": record.id,
                    "model": report["model"],
                    "tasks_file": record.tasks_file,
                    "created_at": record.created_at,
                    "updated_at": record.updated_at,
                    "summary": report["summary"],
                }
            )
    finally:
        results.close()
    if as_json:
        print_json({"items": items})
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="evals", title_justify="left")
    table.add_column("eval", no_wrap=True)  # whole: copied into eval report and compare
    table.add_column("model", overflow="fold")
    for name in ("tasks", "epochs", "pass@1", "cost $"):
        table.add_column(name, justify="right")
    table.add_column("updated", no_wrap=True)
    for item in items:
        summary = item["summary"]
        table.add_row(
            item["eval_id"],
            escape(str(item["model"])),  # a task file's text: never read as markup
            str(summary["tasks"]),
            str(summary["epochs"]),
            f"{summary['pass_rate']:.1%} ± {summary['stderr']:.1%}",
            f"{summary['cost_usd']:.4f}",
            _short_time(item["updated_at"]),
        )
    Console(highlight=False).print(table)


def _short_time(iso: str) -> str:
    """``2026-12-02T15:43:36.123+00:00`` as ``12-02 15:43`` (the table's width)."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso).strftime("%m-%d %H:%M")
    except ValueError:
        return iso


@eval_app.command("compare")
def eval_compare_command(
    eval_a: Annotated[str, typer.Argument(help="Eval A", show_default=False)],
    eval_b: Annotated[str, typer.Argument(help="Eval B", show_default=False)],
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON")] = False,
) -> None:
    """Two evals side by side: the tasks whose result differs and why, each pass rate ±
    standard error, the paired difference, tokens, cost and time."""
    from treadle.eval.compare import compare_reports, print_comparison
    from treadle.store.urls import default_store_url

    a, b = _stored_reports(store or default_store_url(), [eval_a, eval_b])
    comparison = compare_reports(a, b)
    if as_json:
        print_json(comparison)
    else:
        print_comparison(Console(highlight=False), comparison)


export_app = command_group(help="Write a stored eval in another tool's format.")
eval_app.add_typer(export_app, name="export")


@export_app.command("swebench")
def eval_export_swebench(
    eval_id: Annotated[str, typer.Argument(help="The eval's id", show_default=False)],
    store: StoreOption = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here (default: stdout)")
    ] = None,
    epoch: Annotated[int, typer.Option("--epoch", min=1, help="Which epoch's patches")] = 1,
) -> None:
    """The eval's patches as SWE-bench predictions (JSON Lines of instance_id,
    model_name_or_path, model_patch), for the SWE-bench harness."""
    import json

    from treadle.eval.report import report_path_problem, write_text_whole
    from treadle.eval.swebench import predictions
    from treadle.store.urls import default_store_url

    if output is not None and (problem := report_path_problem(output)):
        fail(problem, EXIT_BAD_INPUT)
    (report,) = _stored_reports(store or default_store_url(), [eval_id])
    lines = "".join(
        json.dumps(line, ensure_ascii=False) + "\n" for line in predictions(report, epoch)
    )
    if output is None:
        typer.echo(lines, nl=False)
    else:
        write_text_whole(output, lines)
