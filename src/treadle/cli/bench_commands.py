"""``treadle bench cli|core|store|runtime|mcp|replay|server|snapshots|canvas|eval``: benchmarks
printed as a table, or one JSON object with --json."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from treadle.cli.output import print_json
from treadle.cli.root import app, command_group

bench_app = command_group(help="Benchmarks (figures as seconds and as ratios within one run).")
app.add_typer(bench_app, name="bench")

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object")]


def print_figures(title: str, figures: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(figures)
        return
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures.items():
        shown = "-" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)
        table.add_row(name, shown)
    Console().print(table)


@bench_app.command("cli")
def bench_cli(
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Runs of each command")] = 5,
    as_json: JsonOption = False,
) -> None:
    """Start-up of --help, --version, run --help, log and conversations (a small store), each
    a new process, beside python -c 'import typer, rich.console, pydantic' (medians)."""
    from treadle.bench.cli import run_cli_bench

    print_figures("treadle bench cli", run_cli_bench(repeats), as_json)


@bench_app.command("core")
def bench_core(
    events: Annotated[
        int, typer.Option("--events", min=100, help="Path length N (audit: 5N, window chain: 50N)")
    ] = 20_000,
    as_json: JsonOption = False,
) -> None:
    """Projection, audit and path window of the pure core on parsed events."""
    from treadle.bench.core import run_core_bench

    print_figures("treadle bench core", run_core_bench(events), as_json)


@bench_app.command("skills")
def bench_skills(
    skills: Annotated[int, typer.Option("--skills", min=2, help="Skill files to load")] = 200,
    as_json: JsonOption = False,
) -> None:
    """Loading a workspace's skills (empty, and with --skills files) and matching a message."""
    from treadle.bench.skills import run_skills_bench

    print_figures("treadle bench skills", run_skills_bench(skills), as_json)


@bench_app.command("runtime")
def bench_runtime(
    long: Annotated[
        int, typer.Option("--long", min=100, help="Events of the long history")
    ] = 10_000,
    steps: Annotated[int, typer.Option("--steps", min=10)] = 200,
    as_json: JsonOption = False,
) -> None:
    """Treadle's overhead per agent step (store + projection) at 100 and at --long events,
    and the sandbox's cost to the terminal (per command, and to start a conversation's shell)."""
    from treadle.bench.runtime import run_runtime_bench

    print_figures("treadle bench runtime", run_runtime_bench(long=long, steps=steps), as_json)


@bench_app.command("mcp")
def bench_mcp(
    starts: Annotated[int, typer.Option("--starts", min=1)] = 5,
    calls: Annotated[int, typer.Option("--calls", min=10)] = 200,
    as_json: JsonOption = False,
) -> None:
    """What an MCP server costs a conversation: its start (plain and sandboxed) and one tool
    call's round trip."""
    from treadle.bench.mcp import run_mcp_bench

    print_figures("treadle bench mcp", run_mcp_bench(starts=starts, calls=calls), as_json)


@bench_app.command("replay")
def bench_replay(
    steps: Annotated[int, typer.Option("--steps", min=1, help="Recorded think calls")] = 60,
    as_json: JsonOption = False,
) -> None:
    """A recorded replay (--mode recorded) per event, against the run that recorded it."""
    from treadle.bench.replay import run_replay_bench

    print_figures("treadle bench replay", run_replay_bench(steps), as_json)


@bench_app.command("server")
def bench_server(
    events: Annotated[int, typer.Option("--events", min=1000)] = 100_000,
    subscribers: Annotated[int, typer.Option("--subscribers", min=1)] = 50,
    branched_events: Annotated[
        int,
        typer.Option(
            "--branched-events",
            min=10_000,
            help="Size of the 50-branch conversation of tree_s, audit_s, search_text_page_s "
            "(the floor is measured at 1,000,000)",
        ),
    ] = 100_000,
    conversations: Annotated[
        str | None,
        typer.Option(
            "--conversations",
            help="Instead: N conversations at once (a list, e.g. 1,10,50,100,200), each 5 "
            "sandboxed terminal calls and a finish against a model answering in 0.5 s; wall "
            "against one, errors, RSS and CPU per model step",
            metavar="N[,N...]",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option("--store", help="With --conversations: the store (default: a new SQLite)"),
    ] = None,
    max_running: Annotated[
        int | None,
        typer.Option("--max-running", min=1, help="With --conversations: the server's cap"),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="With --conversations: the server's --workers (default: its own, two per core)",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """HTTP search pages, live fan-out to WebSocket subscribers, catch-up after a reconnect;
    branch tree, audit and text search of a large branched conversation. With
    --conversations: many conversations run at once, and their cost per model step."""
    if conversations is not None:
        from treadle.bench.server_load import run_server_load_bench

        counts = _counts(conversations)
        figures = run_server_load_bench(
            counts, store_url=store, max_running=max_running, workers=workers
        )
        print_figures("treadle bench server --conversations", figures, as_json)
        return
    from treadle.bench.server import run_server_bench

    figures = run_server_bench(events, subscribers, branched_events=branched_events)
    print_figures("treadle bench server", figures, as_json)


def _counts(text: str) -> list[int]:
    """``1,10,50`` as numbers, each 1-1000 (a bad list is a usage error naming the item)."""
    counts = []
    for item in text.split(","):
        try:
            count = int(item.strip())
        except ValueError:
            message = f"{item!r} is not a number"
            raise typer.BadParameter(message, param_hint="--conversations") from None
        if not 1 <= count <= 1000:
            raise typer.BadParameter(f"{count} is not in 1-1000", param_hint="--conversations")
        counts.append(count)
    return counts


@bench_app.command("snapshots")
def bench_snapshots(
    files: Annotated[int, typer.Option("--files", min=10)] = 10_000,
    total_bytes: Annotated[int, typer.Option("--bytes", min=1000)] = 100_000_000,
    batches: Annotated[int, typer.Option("--batches", min=2)] = 10,
    changed: Annotated[int, typer.Option("--changed", min=1, help="Files changed per batch")] = 10,
    as_json: JsonOption = False,
) -> None:
    """Workspace snapshots on a large workspace: ms per batch, bytes added vs changed, restore
    of the changed files; beside git add -A && git commit of the same changes on a copy."""
    from treadle.bench.snapshots import run_snapshots_bench

    if changed > files:
        from treadle.cli.output import EXIT_BAD_INPUT, fail

        fail(f"--changed {changed} is more than --files {files}", EXIT_BAD_INPUT)
    figures = run_snapshots_bench(files, total_bytes, batches, changed)
    print_figures("treadle bench snapshots", figures, as_json)


@bench_app.command("canvas")
def bench_canvas(
    sizes: Annotated[
        str, typer.Option("--sizes", help="Conversation sizes in events, comma-separated")
    ] = "100,10000,100000",
    runs: Annotated[int, typer.Option("--runs", min=1, help="Cold page loads per size")] = 5,
    chromium: Annotated[str, typer.Option("--chromium", help="Chromium binary")] = (
        "/usr/bin/chromium"
    ),
    as_json: JsonOption = False,
) -> None:
    """The Canvas in a real browser: first event, interactive, older page, JS heap."""
    from treadle.bench.canvas import run_canvas_bench

    try:
        counts = [int(part.replace("_", "")) for part in sizes.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter("--sizes takes numbers such as 100,10000,100000") from None
    print_figures(
        "treadle bench canvas", run_canvas_bench(counts, runs=runs, chromium=chromium), as_json
    )


@bench_app.command("eval")
def bench_eval(
    tasks: Annotated[int, typer.Option("--tasks", min=10, help="Tasks per run")] = 100,
    steps: Annotated[int, typer.Option("--steps", min=2, help="Model responses per task")] = 5,
    delay: Annotated[
        float, typer.Option("--model-delay", min=0.0, help="Seconds each model answer takes")
    ] = 0.2,
    workers: Annotated[
        str, typer.Option("--workers", help="Worker counts N to run, comma-separated")
    ] = "1,2,4",
    as_json: JsonOption = False,
) -> None:
    """An eval on the local Ray (needs treadle[eval]): tasks per minute at each N, and
    Treadle's overhead per task (wall time minus model time); floors: overhead <= 1 s,
    N=4 >= 3x N=1."""
    from treadle.bench.eval import run_eval_bench
    from treadle.eval.ray_engine import EvalEngineUnavailable, import_ray

    try:
        import_ray()
        counts = tuple(int(part) for part in workers.split(",") if part.strip())
    except EvalEngineUnavailable as error:
        from treadle.cli.output import EXIT_BAD_INPUT, fail

        fail(str(error), EXIT_BAD_INPUT)
    except ValueError:
        raise typer.BadParameter("--workers takes numbers such as 1,2,4") from None
    figures = run_eval_bench(tasks, steps, delay, counts)
    print_figures("treadle bench eval", figures, as_json)
