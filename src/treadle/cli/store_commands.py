"""``treadle store info|check``, ``treadle log``, ``treadle export jsonl`` and ``treadle bench
store``: reading and checking a store from the command line.

Exit codes (README.md, the command line): 0 ok, 1 contract violations or a damaged file, 2 bad input or usage.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.cli.bench_commands import JsonOption, bench_app, print_figures
from treadle.cli.openhands_commands import export_app
from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail, paged, print_json
from treadle.cli.progress import phases
from treadle.cli.root import app, command_group
from treadle.cli.store_options import StoreOption
from treadle.cli.store_options import open_existing_store as open_existing_store

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from treadle.events.model import CondensationEvent, Event
    from treadle.store.base import ConversationInfo, EventStore, StoreError

store_app = command_group(
    name="store", help="Inspect and check a store of conversations.", no_args_is_help=True
)
app.add_typer(store_app, name="store")

_CHUNK = 2_000
"""Events read per query when a command goes through a whole conversation."""


def all_conversations(store: EventStore) -> Iterator[ConversationInfo]:
    offset = 0
    while True:
        page = store.list_conversations(limit=500, offset=offset)
        yield from page
        if len(page) < 500:
            return
        offset += len(page)


def conversations_or_damage(store: EventStore) -> Iterator[ConversationInfo | StoreError]:
    """Every conversation, as ``all_conversations``; a row that cannot be read (bad metadata
    JSON, a bad time) comes as the StoreError naming it, and the rows after it still come."""
    from treadle.store.base import StoreError, StoreUnavailable

    offset = 0
    while True:
        try:
            page: list[ConversationInfo | StoreError] = list(
                store.list_conversations(limit=500, offset=offset)
            )
        except StoreUnavailable:
            raise
        except StoreError:  # a damaged row in this page: read it one row at a time
            page = []
            for position in range(offset, offset + 500):
                try:
                    row = store.list_conversations(limit=1, offset=position)
                except StoreUnavailable:
                    raise
                except StoreError as error:
                    page.append(error)
                    continue
                if not row:
                    break
                page.extend(row)
        yield from page
        if len(page) < 500:
            return
        offset += len(page)


def all_events(store: EventStore, conversation: str, count: int) -> Iterator[Event]:
    """Every stored event of ``conversation`` in seq order, read in chunks."""
    for start in range(0, count, _CHUNK):
        for stored in store.get_range(conversation, start, start + _CHUNK):
            yield stored.event


def _short_heads(store: EventStore, conversations: list[ConversationInfo]) -> dict[str, str]:
    """Each conversation's head as its short prefix, unique among that conversation's events
    (what ``treadle switch`` and ``log --head`` take); a log that cannot be read keeps its id
    whole."""
    from treadle.cli.ids import short_ids
    from treadle.store.base import StoreError

    shown = {}
    for info in conversations:
        if info.head_id is None:
            continue
        try:
            universe = [shape.id for shape in store.shapes(info.id)]
        except StoreError:
            continue
        shown[info.id] = short_ids([info.head_id], universe)[info.head_id]
    return shown


# -- treadle store info | check --------------------------------------------------------------


@store_app.command("info")
def store_info(
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Conversations, their event counts and heads, and the size of the store."""
    from treadle.store.base import ConversationInfo, StoreError

    event_store = open_existing_store(store)
    try:
        rows = list(conversations_or_damage(event_store))
        facts = _store_facts(event_store)
        conversations = [row for row in rows if isinstance(row, ConversationInfo)]
        heads = {} if as_json else _short_heads(event_store, conversations)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        event_store.close()
    damaged = [str(row) for row in rows if isinstance(row, StoreError)]
    total = sum(info.event_count for info in conversations)
    if as_json:
        print_json(
            {
                **facts,
                "damaged": damaged,
                "conversations": [
                    {
                        "id": info.id,
                        "title": info.title,
                        "events": info.event_count,
                        "head_id": info.head_id,
                        "created_at": info.created_at.isoformat(),
                        "updated_at": info.updated_at.isoformat(),
                    }
                    for info in conversations
                ],
                "events": total,
            }
        )
        if damaged:
            raise typer.Exit(EXIT_VIOLATIONS)
        return
    console = Console()
    for name, value in facts.items():
        console.print(f"{name}: {escape(str(value))}")
    # Ids as their short unique prefixes, whole (they are copied into the next command): a
    # conversation's among the store's, a head's among its conversation's events.
    from treadle.cli.ids import short_ids

    ids = short_ids(info.id for info in conversations)
    table = Table(title=f"{len(conversations)} conversation(s), {total} event(s)")
    table.add_column("id", no_wrap=True)
    table.add_column("title", ratio=1, overflow="fold")
    table.add_column("events", justify="right")
    table.add_column("head", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    for info in conversations:
        table.add_row(  # ids and titles are anyone's text: never read as markup
            escape(ids[info.id]),
            escape(info.title or ""),
            str(info.event_count),
            escape(heads.get(info.id, info.head_id or "-")),
            info.updated_at.strftime("%m-%d %H:%M"),
        )
    console.print(table)
    for message in damaged:
        typer.echo(f"damaged: {message}", err=True)
    if damaged:
        raise typer.Exit(EXIT_VIOLATIONS)


def _store_facts(store: EventStore) -> dict[str, Any]:
    facts: dict[str, Any] = {"store": store.url, "backend": type(store).__name__}
    path = getattr(store, "path", None)
    if isinstance(path, Path):
        facts["file"] = str(path)
        # A store with a file path is a SQLite store, the one with file_size().
        facts["bytes_on_disk"] = store.file_size()  # type: ignore[attr-defined]
        facts["durability"] = getattr(store, "durability", None)
    return facts


@store_app.command("check")
def store_check(
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Also remove what killed runs left on this machine (terminal folders in "
            "TMPDIR, pids cgroups) and say how much",
        ),
    ] = False,
) -> None:
    """Check the file (SQLite integrity_check) and audit every conversation; exit 1 on any
    violation or damage. Every command that opens a store removes a killed run's leftovers;
    ``--repair`` says what it removed."""
    from treadle.runtime.tools.terminal_folders import sweep as sweep_leftovers
    from treadle.store.base import StoreError, StoreUnavailable

    event_store = open_existing_store(store, sweep=not repair)
    swept = sweep_leftovers() if repair else None
    findings: list[dict[str, Any]] = []
    checked = 0
    try:
        with phases() as shown:
            shown.start("checking the file")
            integrity = getattr(event_store, "integrity_check", None)
            problems = integrity() if integrity is not None else []
            findings.extend({"contract": "STORE-INTEGRITY", "message": p} for p in problems)
            rows = list(conversations_or_damage(event_store))
            events = sum(row.event_count for row in rows if not isinstance(row, StoreError))
            shown.start(f"auditing {len(rows):,} conversation(s), events", total=events)
            for info in rows:
                if isinstance(info, StoreError):  # a row that cannot be read: report, go on
                    findings.append({"contract": "STORE-INTEGRITY", "message": str(info)})
                    continue
                try:
                    findings.extend(_check_conversation(event_store, info))
                except StoreUnavailable:
                    raise
                except StoreError as error:  # a damaged event: this conversation only
                    findings.append(
                        {"contract": "STORE-INTEGRITY", "conversation": info.id,
                         "message": str(error)}
                    )  # fmt: skip
                checked += 1
                shown.advance(info.event_count)
    except StoreError as error:
        findings.append({"contract": "STORE-INTEGRITY", "message": str(error)})
    finally:
        event_store.close()
    if as_json:
        report: dict[str, Any] = {
            "store": event_store.url,
            "conversations": checked,
            "violations": findings,
        }
        if swept is not None:
            report["repaired"] = {"terminal_folders": swept.folders, "cgroups": swept.cgroups}
        print_json(report)
    else:
        console = Console()
        if swept is not None:
            console.print(
                f"repaired: removed {swept.folders} terminal folder(s) and {swept.cgroups} "
                "cgroup(s) left by killed runs"
            )
        for finding in findings:
            where = escape(f" [{finding['conversation']}]") if "conversation" in finding else ""
            ids = escape(", ".join(finding.get("event_ids", [])))
            console.print(
                f"[bold red]{finding['contract']}[/]{where} {escape(finding['message'])}"
                + (f" ({ids})" if ids else "")
            )
        verdict = "[bold green]clean[/]" if not findings else f"{len(findings)} violation(s)"
        console.print(f"{verdict}: {checked} conversation(s) checked in {escape(event_store.url)}")
    if findings:
        raise typer.Exit(EXIT_VIOLATIONS)


def _check_conversation(store: EventStore, info: ConversationInfo) -> list[dict[str, Any]]:
    from treadle.events.audit import audit_events

    events = list(all_events(store, info.id, info.event_count))
    findings: list[dict[str, Any]] = []
    if len(events) != info.event_count:
        findings.append(
            {
                "contract": "APPEND-COUNT",
                "conversation": info.id,
                "message": f"{len(events)} events stored, the count says {info.event_count}",
            }
        )
    report = audit_events(events, head=info.head_id)
    for violation in report.violations:
        findings.append({"conversation": info.id, **violation.to_json_dict()})
    if info.head_id is not None and info.head_id not in {e.id for e in events}:
        findings.append(
            {
                "contract": "TREE-HEAD",
                "conversation": info.id,
                "event_ids": [info.head_id],
                "message": "the saved head is not an event of the log",
            }
        )
    return findings


# -- treadle log -----------------------------------------------------------------------------


LOG_TABLE_EVENTS = 200
"""Events ``treadle log`` shows on its table without --limit (the last ones of the path)."""


@app.command("log")
def log(
    conversation: Annotated[
        str, typer.Argument(help="The stored conversation: its id or a unique prefix")
    ],
    store: StoreOption = None,
    head: Annotated[
        str | None,
        typer.Option("--head", help="Head event id or prefix (default: the saved head)"),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=0,
            help=f"Only the last K events of the path (0: all) [default: {LOG_TABLE_EVENTS} on "
            "the table, all with --json]",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of events")] = False,
) -> None:
    """Print a stored conversation's active path root..head (TREE-PATH), then its status,
    totals, settings and the agent's final answer in full."""
    from treadle.cli.ids import resolve_conversation, resolve_event, short_ids
    from treadle.cli.terminal_text import visible
    from treadle.cli.transcript import answer_renderable, final_answer
    from treadle.events.model import event_to_dict
    from treadle.store.base import StoreError

    event_store = open_existing_store(store)
    try:
        conversation = resolve_conversation(event_store, conversation)
        if head is not None:
            head = resolve_event(event_store, conversation, head, contract="TREE-HEAD")
        if as_json:  # unchanged: every event of the path unless --limit says otherwise
            path = event_store.path_to_root(conversation, head, limit or None)
        else:
            shown = LOG_TABLE_EVENTS if limit is None else limit
            # One more than shown, to know whether the path is longer.
            path = event_store.path_to_root(conversation, head, shown + 1 if shown else None)
            cut = bool(shown) and len(path) > shown
            path = path[1:] if cut else path
            totals = _totals_lines(event_store, conversation)
            ids = short_ids([e.id for e in path], (s.id for s in event_store.shapes(conversation)))
            answer = final_answer(event_store.path_to_root(conversation, head, 400))
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        event_store.close()
    if as_json:
        print_json([event_to_dict(event) for event in path])
        return
    title = f"{visible(conversation)}: {len(path)} event(s) on the active path"
    table = Table(title=escape(title + (" (the last ones)" if cut else "")))
    table.add_column("id", no_wrap=True)  # whole: it is copied into the next command
    table.add_column("time", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("summary", overflow="fold", ratio=1)
    for event in path:
        table.add_row(
            escape(ids[event.id]),
            escape(visible(event.timestamp[11:19] or event.timestamp)),
            event.kind,
            escape(visible(_summary(event))),
        )
    console = Console()
    with paged(console):
        console.print(table)
        for line in totals:
            console.print(escape(visible(line)))
        if answer is not None:
            console.rule("final answer", align="left")
            console.print(answer_renderable(answer))
    if cut:
        typer.echo(f"the last {len(path)} events shown: --limit 0 shows the whole path", err=True)


def _totals_lines(event_store: EventStore, conversation: str) -> list[str]:
    """What ``treadle log`` prints under the path: the conversation's status, totals (events,
    tokens and cost of the whole log, every branch) and settings."""
    from treadle.cli.overview import LeaseLook, overview, status_text
    from treadle.data.mcp import mcp_servers_text
    from treadle.runtime.isolation import read_isolation
    from treadle.runtime.mcp_servers import read_mcp_servers

    info = event_store.get_conversation(conversation)
    leases = LeaseLook(event_store.url)
    try:
        item = overview(event_store, info, leases)
    finally:
        leases.close()
    settings = info.metadata.get("settings")
    shown = "none stored" if settings is None else _settings_text(settings)
    isolation = read_isolation(event_store, conversation)
    if isolation is None:
        ran = "no run recorded what its tools ran under"
    else:
        ran = isolation.text
        if isolation.unsandboxed_runs and isolation.sandbox != "none":
            ran += f"; {isolation.unsandboxed_runs} earlier run(s) had no sandbox"
    lines = [
        f"status: {status_text(item)}",
        f"whole log: {info.event_count} event(s); tokens {item.prompt_tokens} in / "
        f"{item.completion_tokens} out; cost ${item.cost_usd:.4f}",
        f"settings: {shown}",
        f"isolation (last run): {ran}",
    ]
    servers = read_mcp_servers(event_store, conversation)
    told = None if servers is None else mcp_servers_text(servers)
    if told is not None:
        lines.append(f"{told} (last run)")
    lines.extend(_model_changes(event_store, conversation))
    return lines


MODEL_CHANGES_SHOWN = 20


def _model_changes(event_store: EventStore, conversation: str) -> list[str]:
    """Each ``model`` fact of the log (a continued run that took another model), oldest
    first, with when it was made: the settings line shows only the model now."""
    from treadle.data.model_change import MODEL_KEY, model_change_text
    from treadle.events.model import StateChangeEvent
    from treadle.store.base import EventQuery

    query = EventQuery(
        kinds=["state_change"], text=f'"key":"{MODEL_KEY}"', order="desc", limit=MODEL_CHANGES_SHOWN
    )
    lines = []
    for stored in reversed(event_store.search(conversation, query).items):
        event = stored.event
        if isinstance(event, StateChangeEvent) and event.key == MODEL_KEY:
            told = model_change_text(event.value)
            if told is not None:
                lines.append(f"{told} (at {event.timestamp[:19]}, event {stored.seq})")
    return lines


def condensation_line(event: CondensationEvent) -> str:
    """A condensation in one line: how much it forgets (those events stay in the log, above),
    its summary or why it has none."""
    said = (
        f"summary: {event.summary}" if event.summary is not None else (event.note or "no summary")
    )
    line = f"forgets {len(event.forgotten_event_ids)} event(s) from the model's context; {said}"
    return line.replace("\n", " ")[:160]


def _settings_text(settings: Any) -> str:
    """Stored settings in one line (the system prompt left out: it is long and the same)."""
    if not isinstance(settings, dict):
        return repr(settings)[:200]
    model = settings.get("model") or {}
    name = (
        model.get("model") or "?"
        if model.get("kind") == "litellm"
        else f"scripted {model.get('script') or '(inline)'}"
    )
    base = f" at {model['base_url']}" if model.get("base_url") else ""
    tools = ", ".join(settings.get("tools") or ())
    sandbox = settings.get("sandbox") or {"kind": "bubblewrap", "network": "off"}
    return (
        f"model {name}{base}; workspace {settings.get('workspace')}; "
        f"confirmation {settings.get('confirmation')}; tools {tools}; "
        f"sandbox {sandbox.get('kind')}, network {sandbox.get('network')}; "
        f"condense {settings.get('condense', 'auto')}"
        + (f" at {settings['context_tokens']} tokens" if settings.get("context_tokens") else "")
        + _budget_text(settings)
        + _hooks_text(settings)
    )


def _hooks_text(settings: dict[str, Any]) -> str:
    """The stored hooks, counted per event (docs/hooks.md)."""
    hooks = settings.get("hooks") if isinstance(settings.get("hooks"), dict) else {}
    counts = [
        f"{event} {sum(len(m.get('hooks') or ()) for m in matchers)}"
        for event, matchers in (hooks or {}).items()
        if matchers
    ]
    if settings.get("trust_workspace_hooks"):
        counts.append("the workspace's (trusted)")
    return f"; hooks {', '.join(counts)}" if counts else ""


def _budget_text(settings: dict[str, Any]) -> str:
    """The stored budgets, as ``treadle log`` shows them beside the totals."""
    budgets = []
    if settings.get("max_total_tokens") is not None:
        budgets.append(f"max {settings['max_total_tokens']} tokens")
    if settings.get("max_cost_usd") is not None:
        budgets.append(f"max cost ${settings['max_cost_usd']:.4f}")
    return f"; budget {', '.join(budgets)}" if budgets else ""


def _summary(event: Event) -> str:
    """One line saying what the event is about."""
    if event.kind == "action":
        return f"{event.tool_name}({event.raw_arguments[:80]})"
    if event.kind == "observation":
        return event.content[:100]
    if event.kind == "agent_error":
        return event.error[:100]
    if event.kind == "state_change":
        return f"{event.key} = {event.value!r}"[:100]
    if event.kind == "condensation":
        return condensation_line(event)
    text = getattr(event, "text", None) or getattr(event, "summary", None) or ""
    return str(text).replace("\n", " ")[:100]


# -- treadle export jsonl --------------------------------------------------------------------


@export_app.command("jsonl")
def export_jsonl(
    conversation: Annotated[
        str, typer.Argument(help="The stored conversation: its id or a unique prefix")
    ],
    store: StoreOption = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="File to write (default: stdout)")
    ] = None,
) -> None:
    """Write every event of a conversation as JSON Lines in seq order (what `treadle audit`
    reads)."""
    from treadle.cli.ids import resolve_conversation
    from treadle.store.base import ConversationNotFound, StoreError

    event_store = open_existing_store(store)
    try:
        conversation = resolve_conversation(event_store, conversation)
        info = event_store.get_conversation(conversation)
        if output is None:
            _write_jsonl(event_store, info, sys.stdout)
        else:
            with output.open("w", encoding="utf-8") as file:
                _write_jsonl(event_store, info, file)
            typer.echo(f"wrote {info.event_count} event(s) to {output}", err=True)
    except ConversationNotFound:
        fail(f"no conversation {conversation!r} in store {event_store.url}", EXIT_BAD_INPUT)
    except OSError as error:
        fail(f"cannot write {output}: {error.strerror or error}", EXIT_BAD_INPUT)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        event_store.close()


def _write_jsonl(store: EventStore, info: ConversationInfo, out: IO[str]) -> None:
    from treadle.events.model import event_to_json

    for event in all_events(store, info.id, info.event_count):
        out.write(event_to_json(event) + "\n")
    out.flush()


# -- treadle bench store ---------------------------------------------------------------------


@bench_app.command("store")
def bench_store(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Where to measure: a sqlite:/// directory or file URL (a fresh temporary "
            "directory by default), or a postgresql:// URL (a fresh schema is used and dropped)",
        ),
    ] = None,
    events: Annotated[
        int,
        typer.Option(
            "--events",
            min=10_000,
            help="Size of the big conversation (the floors are measured at 1,000,000); the append, search and "
            "window sizes are capped by it",
        ),
    ] = 100_000,
    as_json: JsonOption = False,
) -> None:
    """Append rate (durable, fast, vs raw sqlite3), growth, window/path/search times, RSS and
    bytes per event of a store."""
    from treadle.bench.store import run_store_bench
    from treadle.store.base import StoreError

    try:
        figures = run_store_bench(store, events=events, progress=not as_json)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    print_figures("treadle bench store", figures, as_json)
