"""``treadle import jsonl``: a log file (what ``treadle export jsonl`` writes) into a store as a
new conversation, all or nothing.

Exit codes (README, "The command line"): 0 imported, 1 the log breaks a contract the store enforces (nothing
stored), 2 bad input or usage (unreadable file, bad id, a conversation with that id exists).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from treadle.cli.core_commands import read_log
from treadle.cli.openhands_commands import import_app
from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail
from treadle.cli.progress import phases
from treadle.cli.store_options import StoreOption, open_store_or_exit
from treadle.errors import TreadleError

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from treadle.events.model import Event
    from treadle.store.base import EventStore


def imported_head(events: list[Event]) -> str | None:
    """The head a log file implies (it does not store one): the last recorded branch switch
    when nothing but state changes came after it, else the last appended event that is not a
    state change (TREE-HEAD's default, what a run leaves)."""
    from treadle.events.model import StateChangeEvent
    from treadle.events.tree import EventTree
    from treadle.runtime.status import HEAD_KEY

    tree = EventTree(events)
    last_move: str | None = None
    for event in reversed(events):
        if not isinstance(event, StateChangeEvent):
            break
        if event.key == HEAD_KEY and isinstance(event.value, dict) and last_move is None:
            moved = event.value.get("head")
            if isinstance(moved, str) and moved in tree:
                last_move = moved
    return last_move if last_move is not None else tree.default_head()


@import_app.command("jsonl")
def import_jsonl(
    file: Annotated[
        Path,
        typer.Argument(
            help="Log file: JSON Lines (one event per line, as `treadle export jsonl` writes) "
            "or a JSON array; '-' for stdin"
        ),
    ],
    store: StoreOption = None,
    conversation_id: Annotated[
        str | None, typer.Option("--id", help="Id of the new conversation (default: a new one)")
    ] = None,
    title: Annotated[
        str | None, typer.Option("--title", help="Title (default: 'imported from' the file's name)")
    ] = None,
) -> None:
    """Store a log file as a new conversation and print its id. A log the store cannot hold
    (duplicate ids, missing parents, a cycle, a parent after its child) is refused whole."""
    from treadle.events.audit import audit_events
    from treadle.store.audit_summary import keep_imported
    from treadle.store.checks import check_conversation_id
    from treadle.store.openhands.transfer import STORE_REFUSES

    if file.is_dir():
        fail(
            f"{file} is a folder: `treadle import jsonl` reads a log file "
            "(an OpenHands conversation folder: `treadle import openhands`)",
            EXIT_BAD_INPUT,
        )
    with phases() as shown:
        events = read_log(file, shown)  # strict: exits 2 naming the line and field
        shown.start(f"auditing {len(events):,} events")
        report = audit_events(events)
    refused = [v for v in report.violations if v.contract in STORE_REFUSES]
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        fail(
            f"{file}: {first.contract}: {first.message}{more}; a store cannot hold this log, "
            f"nothing was stored (see treadle audit {file})",
            EXIT_VIOLATIONS,
        )
    if conversation_id is not None:
        try:
            check_conversation_id(conversation_id)
        except ValueError as error:
            fail(str(error), EXIT_BAD_INPUT)
    head = imported_head(events)
    event_store = open_store_or_exit(store)
    try:
        with phases() as shown:
            shown.start(f"storing {len(events):,} events (one transaction)")
            new_id = _store_log(
                event_store, events, head, conversation_id, title or _default_title(file)
            )
            # the audit of the stored log, while its events are in memory: the first
            # `treadle audit` of it (or a server's) then starts from it, in any process
            shown.start("keeping its audit checkpoint")
            keep_imported(event_store, new_id, events)
    finally:
        event_store.close()
    typer.echo(new_id)
    typer.echo(
        f"imported {len(events)} event(s) from {file} as {new_id}, head {head or '(empty)'}",
        err=True,
    )
    kept = [v for v in report.violations if v.contract not in STORE_REFUSES]
    if kept:
        contracts = ", ".join(sorted({v.contract for v in kept}))
        typer.echo(
            f"  note: {len(kept)} contract violation(s) ({contracts}) imported as they are: "
            f"see treadle audit {file}",
            err=True,
        )


def _default_title(file: Path) -> str:
    return "imported from " + ("stdin" if str(file) == "-" else file.name)


def _store_log(
    store: EventStore,
    events: list[Event],
    head: str | None,
    conversation_id: str | None,
    title: str,
) -> str:
    """The id of a new conversation holding ``events``; exits 2, with nothing stored, when
    the store refuses any of it."""
    from treadle.store.base import ConversationExists, StoreError, StoreUnavailable
    from treadle.store.openhands.transfer import ORIGIN_KEY

    origin = {ORIGIN_KEY: {"format": "jsonl"}}
    try:
        info = store.create_conversation(conversation_id, title=title[:200], metadata=origin)
    except ConversationExists:
        fail(
            f"conversation {conversation_id!r} is already in store {store.url}: give another "
            "--id, or none for a new one",
            EXIT_BAD_INPUT,
        )
    except (StoreError, ValueError) as error:
        fail(str(error), EXIT_BAD_INPUT)
    try:
        if events:
            store.append_batch(info.id, events)  # one transaction: all or nothing
        store.set_head(info.id, head)
    except (TreadleError, ValueError, RecursionError) as error:
        # ValueError: an event no store can encode; the conversation goes with what it held.
        try:
            store.delete_conversation(info.id)
        except StoreUnavailable:
            fail(
                f"the store refused the log ({error}) and conversation {info.id} it was "
                "going into could not be removed: delete it",
                EXIT_BAD_INPUT,
            )
        fail(f"the store refused the log, nothing was stored: {error}", EXIT_BAD_INPUT)
    return info.id
