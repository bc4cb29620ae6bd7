"""``treadle conversations``: the stored conversations with their status, size, tokens, cost
and last activity.

Exit codes (README, "The command line"): 0 ok, 1 a conversation row that cannot be read, 2 bad input or usage.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.cli.app import app
from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail, print_json
from treadle.cli.overview import LeaseLook, Overview, overview, status_text
from treadle.cli.store_commands import conversations_or_damage, open_existing_store
from treadle.cli.store_options import StoreOption
from treadle.store.base import ConversationInfo, StoreError


def when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


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
        _print_table(items, len(infos))
    if len(shown) < len(infos):
        typer.echo(f"{len(shown)} of {len(infos)} shown: --limit 0 lists all", err=True)
    for message in damaged:
        typer.echo(f"damaged: {message}", err=True)
    if damaged:
        raise typer.Exit(EXIT_VIOLATIONS)


def _print_table(items: list[Overview], total: int) -> None:
    table = Table(title=f"{total} conversation(s)")
    for column in ("id", "title", "status", "events", "tokens", "cost", "last activity"):
        right = column in ("events", "tokens", "cost")
        table.add_column(
            column,
            justify="right" if right else "left",
            no_wrap=column == "id",  # an id is copied whole into the next command
            overflow="fold" if column == "status" else "ellipsis",
        )
    for item in items:
        table.add_row(  # ids, titles and reasons are anyone's text: never read as markup
            escape(item.info.id),
            escape(item.info.title or ""),
            escape(status_text(item)),
            str(item.info.event_count),
            f"{item.prompt_tokens + item.completion_tokens:,}"
            + _of_budget(item, "max_total_tokens", "{:,}"),
            f"${item.cost_usd:.4f}" + _of_budget(item, "max_cost_usd", "${:.4f}"),
            when(item.info.updated_at),
        )
    Console().print(table)


def _of_budget(item: Overview, name: str, shape: str) -> str:
    """`` of BUDGET`` when the conversation's settings set budget ``name``."""
    settings = item.info.metadata.get("settings")
    limit = settings.get(name) if isinstance(settings, dict) else None
    return f" of {shape.format(limit)}" if isinstance(limit, int | float) else ""
