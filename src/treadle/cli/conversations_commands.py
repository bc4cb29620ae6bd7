"""``treadle conversations``: the stored conversations with their status, size, tokens, cost
and last activity; the per-conversation figures (``Overview``) ``treadle log`` shows too.

Exit codes (DESIGN.md): 0 ok, 1 a conversation row that cannot be read, 2 bad input or usage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.cli.app import app
from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail, print_json
from treadle.cli.store_commands import conversations_or_damage, open_existing_store
from treadle.cli.store_options import StoreOption
from treadle.events.model import ActionEvent, MessageEvent
from treadle.runtime.status import ConversationStatus, read_status
from treadle.store.base import ConversationInfo, EventQuery, EventStore, StoreError
from treadle.store.leases import RunLeases, open_leases

USAGE_TEXT = '"usage":{'
"""How a recorded usage shows in an event's stored JSON (compact, ``None`` left out): the
text filter finds the events of model calls without decoding the others."""
USAGE_PAGE = 1_000
INTERRUPTED = (
    "interrupted: the process that ran it stopped without ending the run (its run lease "
    "expired); run it again to continue"
)
"""What a reader says of a run whose holder died (as the server says it)."""


@dataclass(frozen=True, slots=True)
class Overview:
    """One conversation as a list shows it. Tokens and cost add up every model call in the
    log, on every branch: a call on a branch left behind was paid for too."""

    info: ConversationInfo
    status: str
    status_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float

    def to_json_dict(self) -> dict[str, Any]:
        info = self.info
        return {
            "id": info.id,
            "title": info.title,
            "status": self.status,
            "status_reason": self.status_reason,
            "events": info.event_count,
            "tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "last_activity": info.updated_at.isoformat(),
            "created_at": info.created_at.isoformat(),
            "head_id": info.head_id,
        }


def usage_totals(store: EventStore, conversation_id: str) -> tuple[int, int, float]:
    """(prompt tokens, completion tokens, cost in USD) of every model call the log records.
    Only the events carrying a usage (one per model response) are read and decoded."""
    prompt = completion = 0
    cost = 0.0
    after: int | None = None
    while True:
        query = EventQuery(
            kinds=["action", "message"], text=USAGE_TEXT, after_seq=after, limit=USAGE_PAGE
        )
        page = store.search(conversation_id, query)
        for stored in page.items:
            event = stored.event
            if isinstance(event, ActionEvent | MessageEvent) and event.usage is not None:
                prompt += event.usage.prompt_tokens
                completion += event.usage.completion_tokens
                cost += event.usage.cost_usd
        if page.next_cursor is None:
            return prompt, completion, cost
        after = page.next_cursor


class LeaseLook:
    """Whether a run still has a live holder, for a reading command: the lease table is
    opened only when a conversation says it is running, and closed with this object."""

    def __init__(self, store_url: str) -> None:
        self._url = store_url
        self._leases: RunLeases | None = None
        self._failed = False

    def is_held(self, conversation_id: str) -> bool | None:
        """None when the lease table cannot be read (the status is shown as recorded)."""
        if self._failed:
            return None
        try:
            if self._leases is None:
                self._leases = open_leases(self._url)
            return self._leases.is_held(conversation_id)
        except StoreError:
            self._failed = True
            return None

    def close(self) -> None:
        if self._leases is not None:
            self._leases.close()


def overview(store: EventStore, info: ConversationInfo, leases: LeaseLook) -> Overview:
    status, reason = read_status(store, info.id)
    if status is ConversationStatus.RUNNING and leases.is_held(info.id) is False:
        reason = INTERRUPTED
    prompt, completion, cost = usage_totals(store, info.id)
    return Overview(info, status.value, reason, prompt, completion, cost)


def status_text(item: Overview) -> str:
    return item.status + (f" ({item.status_reason})" if item.status_reason else "")


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
            f"{item.prompt_tokens + item.completion_tokens:,}",
            f"${item.cost_usd:.4f}",
            when(item.info.updated_at),
        )
    Console().print(table)
