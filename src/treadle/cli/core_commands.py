"""``treadle audit | path | project | schema``: the event core on a log file, no store needed.

Exit codes (DESIGN.md): 0 clean, 1 contract violations, 2 bad input or usage.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from treadle.cli.app import app
from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail, print_json
from treadle.errors import ContractError, EventDecodeError
from treadle.events.audit import AuditReport, audit_events
from treadle.events.decode import decode_events
from treadle.events.model import Event, event_to_dict, events_json_schema
from treadle.events.projection import project_messages
from treadle.events.tree import EventTree

FileArg = Annotated[
    Path,
    typer.Argument(help="Log file: JSON Lines (one event per line) or a JSON array; '-' for stdin"),
]
HeadOption = Annotated[
    str | None,
    typer.Option(
        "--head", help="Head event id (default: last appended event that is not a state change)"
    ),
]


def read_log(file: Path) -> list[Event]:
    """The events of ``file``; exits 2 with the line and field on bad input."""
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except OSError as error:
        fail(f"cannot read {file}: {error.strerror or error}", EXIT_BAD_INPUT)
    except UnicodeDecodeError:
        fail(f"{file} is not UTF-8 text", EXIT_BAD_INPUT)
    try:
        return decode_events(text)
    except EventDecodeError as error:
        fail(f"{file}: {error}", EXIT_BAD_INPUT)


def _resolve_head(tree: EventTree, head: str | None) -> str | None:
    if head is None:
        return tree.default_head()
    if head not in tree:
        fail(f"TREE-HEAD: head {head!r} is not an event of the log", EXIT_BAD_INPUT)
    return head


def _active_path(file: Path, head: str | None, limit: int | None = None) -> list[Event]:
    tree = EventTree(read_log(file))
    head_id = _resolve_head(tree, head)
    if head_id is None:
        return []
    try:
        return tree.path_to_root(head_id, limit=limit)  # type: ignore[return-value]
    except ContractError as error:
        fail(str(error), EXIT_VIOLATIONS)


@app.command()
def audit(
    file: FileArg,
    head: HeadOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Check a log against the SPEC.md contracts on every branch; exit 1 on violations."""
    report = audit_events(read_log(file), head=head)
    if as_json:
        print_json(report.to_json_dict())
    else:
        _print_report(report)
    if not report.clean:
        raise typer.Exit(EXIT_VIOLATIONS)


@app.command()
def path(
    file: FileArg,
    head: HeadOption = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=0, help="Only the last K events of the path")
    ] = None,
) -> None:
    """Print the active path root..head as a JSON array of events (TREE-PATH)."""
    print_json([event_to_dict(event) for event in _active_path(file, head, limit)])


@app.command()
def project(
    file: FileArg,
    head: HeadOption = None,
    raw: Annotated[
        bool,
        typer.Option("--raw", help="Plain batching of the path, unanswered calls included"),
    ] = False,
) -> None:
    """Print the messages the model would get for the active path (OpenAI chat format)."""
    path_events = _active_path(file, head)
    try:
        messages = project_messages(path_events, raw=raw)
    except ContractError as error:
        fail(str(error), EXIT_VIOLATIONS)
    print_json(messages)


@app.command()
def schema() -> None:
    """Print the JSON Schema of every event kind (the file format's reference)."""
    print_json(events_json_schema())


def _print_report(report: AuditReport) -> None:
    console = Console()
    if report.violations:
        table = Table(title=f"{len(report.violations)} violation(s)", title_justify="left")
        table.add_column("contract", style="bold red", no_wrap=True)
        table.add_column("events")
        table.add_column("explanation")
        for violation in report.violations:
            table.add_row(violation.contract, ", ".join(violation.event_ids), violation.message)
        console.print(table)
    else:
        console.print("[bold green]clean[/]: no contract violations")
    for notice in report.notices:
        console.print(f"[yellow]{notice.contract}[/]: {notice.message}")
    counts = ", ".join(f"{kind} {count}" for kind, count in sorted(report.counts.items()))
    console.print(f"events: {sum(report.counts.values())} ({counts})")
    console.print(f"heads: {', '.join(report.heads) or '-'}  focus head: {report.head or '-'}")
    console.print(f"pending actions: {', '.join(report.pending) or 'none'}")
