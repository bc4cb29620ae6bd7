"""``treadle conversations``: the stored conversations with their status, size, tokens, cost
and last activity.

Exit codes (README, "The command line"): 0 ok, 1 a conversation row that cannot be read, 2 bad input or usage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail, print_json
from treadle.cli.root import app
from treadle.cli.store_commands import conversations_or_damage
from treadle.cli.store_options import StoreOption, open_existing_store

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from treadle.cli.overview import Overview


@app.command("conversations")
def conversations(
    store: StoreOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON array of conversations")
    ] = False,
    limit: Annotated[
        int,
        typer.Option("--limit", min=0, help="Only the N most recently active (0: all)"),
    ] = 50,
) -> None:
    """List the stored conversations, most recently active first: id, title, status, events,
    tokens, cost and last activity."""
    from treadle.cli.overview import LeaseLook, overview
    from treadle.store.base import ConversationInfo, StoreError

    event_store = open_existing_store(store)
    leases = LeaseLook(event_store.url)
    try:
        rows = list(conversations_or_damage(event_store))
        infos = [row for row in rows if isinstance(row, ConversationInfo)]
        infos.sort(key=lambda info: info.updated_at, reverse=True)
        shown = infos[:limit] if limit else infos
        items = [overview(event_store, info, leases) for info in shown]
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        leases.close()
        event_store.close()
    damaged = [str(row) for row in rows if isinstance(row, StoreError)]
    if as_json:
        print_json([item.to_json_dict() for item in items])
    else:
        _print_table(items, len(infos), [info.id for info in infos])
    if len(shown) < len(infos):
        typer.echo(f"{len(shown)} of {len(infos)} shown: --limit 0 lists all", err=True)
    for message in damaged:
        typer.echo(f"damaged: {message}", err=True)
    if damaged:
        raise typer.Exit(EXIT_VIOLATIONS)


def _print_table(items: list[Overview], total: int, universe: list[str]) -> None:
    """The table fits 80 columns: ids as their short unique prefixes, whole; a status's reason
    (long text) goes under the table instead of into the narrow status column."""
    from treadle.cli.ids import short_ids
    from treadle.cli.terminal_text import visible

    ids = short_ids((item.info.id for item in items), universe)
    table = Table(title=f"{total} conversation(s)")
    table.add_column("id", no_wrap=True)  # whole: it is copied into the next command
    table.add_column("title", ratio=1, overflow="fold")
    table.add_column("status", no_wrap=True)
    for column in ("events", "tokens", "cost"):
        table.add_column(column, justify="right")
    table.add_column("last active", no_wrap=True)
    reasons: list[str] = []
    for item in items:
        short = ids[item.info.id]
        if item.status_reason:
            reasons.append(f"{short} {item.status}: {item.status_reason}")
        table.add_row(  # ids, titles and reasons are anyone's text: never read as markup
            escape(short),
            escape(visible(item.info.title or "")),
            escape(item.status),
            str(item.info.event_count),
            f"{item.prompt_tokens + item.completion_tokens:,}"
            + _of_budget(item, "max_total_tokens", "{:,}"),
            f"${item.cost_usd:.4f}" + _of_budget(item, "max_cost_usd", "${:.4f}"),
            item.info.updated_at.strftime("%m-%d %H:%M"),
        )
    console = Console()
    console.print(table)
    for line in reasons:
        console.print(escape(visible(line)))


def _of_budget(item: Overview, name: str, shape: str) -> str:
    """`` of BUDGET`` when the conversation's settings set budget ``name``."""
    settings = item.info.metadata.get("settings")
    limit = settings.get(name) if isinstance(settings, dict) else None
    return f" of {shape.format(limit)}" if isinstance(limit, int | float) else ""
