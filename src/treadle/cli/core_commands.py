"""``treadle audit | path | project | schema``: the event core on a log file or an OpenHands
conversation folder, no store needed.

Exit codes (README.md, the command line): 0 clean, 1 contract violations, 2 bad input or usage.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail, print_json
from treadle.cli.root import app
from treadle.cli.store_options import StoreOption, open_existing_store
from treadle.errors import ContractError, EventDecodeError

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from treadle.cli.progress import Phases
    from treadle.events.audit import AuditReport
    from treadle.events.model import Event
    from treadle.events.tree import EventTree
    from treadle.store.openhands import FolderProblem

FileArg = Annotated[
    Path,
    typer.Argument(
        help="Log file: JSON Lines (one event per line) or a JSON array; '-' for stdin; an "
        "OpenHands SDK conversation folder (base_state.json + events/); or, when no such file "
        "exists, a stored conversation's id or unique prefix (see --store)"
    ),
]
HeadOption = Annotated[
    str | None,
    typer.Option(
        "--head",
        help="Head event id (default: a folder's saved head, as the OpenHands SDK takes it; "
        "else the last appended event that is not a state change)",
    ),
]


@dataclass(frozen=True, slots=True)
class Log:
    """A log read for the core commands: its events and, for a conversation folder, the head
    it saved (possibly None: an empty head) and what is wrong with the folder."""

    events: list[Event]
    has_saved_head: bool = False
    saved_head: str | None = None
    problems: tuple[FolderProblem, ...] = ()
    files: dict[str, list[str]] | None = None
    """A folder's files by event id, so that findings name them."""

    def files_of(self, event_ids: Iterable[str]) -> list[str]:
        files = self.files or {}
        return [name for event_id in event_ids for name in files.get(event_id, ())]


def names_a_stored_conversation(file: Path) -> bool:
    """Whether the argument is taken as a stored conversation: no file of that name exists
    and it does not look like a path (a missing ``logs/x.jsonl`` is a missing file)."""
    text = str(file)
    return (
        text != "-"
        and not file.exists()
        and "/" not in text
        and not text.endswith((".json", ".jsonl"))
    )


def load_stored(text: str, store: str | None) -> Log:
    """Every event of the stored conversation ``text`` names, with its saved head."""
    from treadle.cli.ids import resolve_conversation
    from treadle.cli.store_commands import all_events
    from treadle.store.base import StoreError

    opened = open_existing_store(store)
    try:
        found = resolve_conversation(opened, text)
        info = opened.get_conversation(found)
        events = list(all_events(opened, found, info.event_count))
        return Log(events, True, info.head_id)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        opened.close()


def _audit_stored(text: str, head: str | None, store: str | None) -> tuple[AuditReport, Log]:
    """The audit of the stored conversation ``text`` names, from the store's kept audit
    checkpoint and the events after it (``treadle.store.audit_summary``): no event decoded."""
    from treadle.cli.ids import resolve_conversation
    from treadle.store.audit_summary import audit_stored
    from treadle.store.base import StoreError

    opened = open_existing_store(store)
    try:
        found = resolve_conversation(opened, text)
        report = audit_stored(opened, found, head)
        return report, Log([], True, opened.head(found))
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        opened.close()


def load_log(file: Path, store: str | None = None) -> Log:
    """The log at ``file`` (a file, '-', an OpenHands conversation folder, or a stored
    conversation when no file has that name); exits 2 on an unreadable file. A folder's
    notices go to stderr; its problems are in ``problems``."""
    if names_a_stored_conversation(file):
        return load_stored(str(file), store)
    from treadle.store.openhands import is_conversation_folder, read_conversation_folder

    if file.is_dir():
        if not is_conversation_folder(file):
            fail(
                f"{file} is a folder but not an OpenHands conversation (base_state.json and "
                "events/): name one conversation's folder",
                EXIT_BAD_INPUT,
            )
        folder = read_conversation_folder(file)
        for notice in folder.notices:
            typer.echo(f"note: {notice}", err=True)
        files: dict[str, list[str]] = {}
        for event, name in zip(folder.events, folder.files, strict=True):
            files.setdefault(event.id, []).append(name)
        return Log(folder.events, True, folder.head, tuple(folder.problems), files)
    return Log(read_log(file))


def read_log(file: Path, shown: Phases | None = None) -> list[Event]:
    """The events of ``file``; exits 2 with the line and field on bad input. ``shown``: the
    command's progress, told of each line decoded."""
    from treadle.events.decode import decode_events

    if file.is_dir():
        return load_log(file).events
    try:
        data = sys.stdin.buffer.read() if str(file) == "-" else _read_regular_file(file)
        text = data.decode("utf-8")
    except OSError as error:
        fail(f"cannot read {file}: {error.strerror or error}", EXIT_BAD_INPUT)
    except UnicodeDecodeError as error:
        fail(f"{file} is not UTF-8 text (byte {error.start} is invalid)", EXIT_BAD_INPUT)
    if shown is not None:
        shown.start(f"reading {file}, lines", total=text.count("\n") or None)
    try:
        return decode_events(text, None if shown is None else shown.advance)
    except EventDecodeError as error:
        fail(f"{file}: {error}", EXIT_BAD_INPUT)


def _read_regular_file(file: Path) -> bytes:
    """The bytes of ``file``, a regular file: a FIFO would block, a device (``/dev/zero``)
    never end. Checked on the opened file, so a swap after the check changes nothing."""
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
    descriptor = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            fail(
                f"{file} is not a regular file (a device, FIFO or socket): name a log file, "
                "or '-' to read standard input",
                EXIT_BAD_INPUT,
            )
        return handle.read()


def _resolve_head(tree: EventTree[Event], head: str | None, log: Log) -> str | None:
    if head is None:
        return log.saved_head if log.has_saved_head else tree.default_head()
    if head not in tree:
        fail(f"TREE-HEAD: head {head!r} is not an event of the log", EXIT_BAD_INPUT)
    return head


def _active_path(
    file: Path, head: str | None, limit: int | None = None, store: str | None = None
) -> list[Event]:
    from treadle.events.tree import EventTree

    log = load_log(file, store)
    if log.problems:
        fail(f"{file}: " + "; ".join(str(problem) for problem in log.problems), EXIT_BAD_INPUT)
    tree = EventTree(log.events)
    if tree.duplicate_positions:  # the tree would quietly take the first: refuse, as audit does
        repeated = log.events[tree.duplicate_positions[0]].id
        count = sum(1 for event in log.events if event.id == repeated)
        fail(
            f"APPEND-DUP-ID: event id {repeated!r} is used by {count} events; a store refuses "
            f"the repeat (see treadle audit {file})",
            EXIT_VIOLATIONS,
        )
    head_id = _resolve_head(tree, head, log)
    if head_id is None:
        return []
    try:
        return tree.path_to_root(head_id, limit=limit)
    except ContractError as error:
        fail(str(error), EXIT_VIOLATIONS)


@app.command()
def audit(
    file: FileArg,
    head: HeadOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
    store: StoreOption = None,
) -> None:
    """Check a log against the contracts (docs/contracts.md) on every branch; exit 1 on violations.

    A conversation folder whose files cannot all be read as events exits 2, files named.
    """
    from treadle.events.audit import audit_events

    if names_a_stored_conversation(file):
        report, log = _audit_stored(str(file), head, store)
    else:
        log = load_log(file, store)
        report = audit_events(log.events, head=head if head is not None else log.saved_head)
    if as_json:
        output = report.to_json_dict()
        if log.has_saved_head:
            output["problems"] = [problem.to_json_dict() for problem in log.problems]
            for violation in output["violations"]:
                violation["files"] = log.files_of(violation["event_ids"])
        print_json(output)
    else:
        _print_report(report, log)
    if log.problems:
        raise typer.Exit(EXIT_BAD_INPUT)
    if not report.clean:
        raise typer.Exit(EXIT_VIOLATIONS)


@app.command()
def path(
    file: FileArg,
    head: HeadOption = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=0, help="Only the last K events of the path")
    ] = None,
    store: StoreOption = None,
) -> None:
    """Print the active path root..head as a JSON array of events (TREE-PATH)."""
    from treadle.events.model import event_to_dict

    print_json([event_to_dict(event) for event in _active_path(file, head, limit, store)])


@app.command()
def project(
    file: FileArg,
    head: HeadOption = None,
    raw: Annotated[
        bool,
        typer.Option("--raw", help="Plain batching of the path, unanswered calls included"),
    ] = False,
    store: StoreOption = None,
) -> None:
    """Print the messages the model would get for the active path (OpenAI chat format)."""
    from treadle.events.projection import project_messages

    path_events = _active_path(file, head, store=store)
    try:
        messages = project_messages(path_events, raw=raw)
    except ContractError as error:
        fail(str(error), EXIT_VIOLATIONS)
    print_json(messages)


@app.command()
def schema() -> None:
    """Print the JSON Schema of every event kind (the file format's reference)."""
    from treadle.events.model import events_json_schema

    print_json(events_json_schema())


def _print_report(report: AuditReport, log: Log) -> None:
    console = Console()
    for problem in log.problems:
        files = ", ".join(problem.files)
        console.print(
            f"[bold red]{problem.code}[/]: {escape(problem.message)} {escape(f'[{files}]')}"
        )
    if report.violations:
        table = Table(title=f"{len(report.violations)} violation(s)", title_justify="left")
        table.add_column("contract", style="bold red", no_wrap=True)
        table.add_column("events")
        table.add_column("explanation")
        for violation in report.violations:
            where = ", ".join([*violation.event_ids, *log.files_of(violation.event_ids)])
            table.add_row(violation.contract, escape(where), escape(violation.message))
        console.print(table)
    else:
        console.print("[bold green]clean[/]: no contract violations")
    for notice in report.notices:
        console.print(f"[yellow]{notice.contract}[/]: {escape(notice.message)}")
    counts = ", ".join(f"{kind} {count}" for kind, count in sorted(report.counts.items()))
    console.print(f"events: {sum(report.counts.values())} ({counts})")
    heads = escape(", ".join(report.heads) or "-")
    console.print(f"heads: {heads}  focus head: {escape(report.head or '-')}")
    console.print(f"pending actions: {escape(', '.join(report.pending) or 'none')}")
