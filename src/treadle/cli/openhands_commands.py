"""``treadle import openhands`` and ``treadle export openhands``: OpenHands SDK conversation
folders into a store and back.

Exit codes (README.md, the command line): 0 all done, 1 some conversation not imported, 2 bad input or usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail, print_json
from treadle.cli.root import app, command_group
from treadle.cli.store_options import StoreOption, open_store_or_exit

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from treadle.store.openhands import ImportResult

import_app = command_group(
    name="import", help="Import conversations made elsewhere into a store.", no_args_is_help=True
)
export_app = command_group(
    name="export", help="Export stored conversations to other formats.", no_args_is_help=True
)
app.add_typer(import_app, name="import")
app.add_typer(export_app, name="export")


@import_app.command("openhands")
def import_openhands(
    directory: Annotated[
        Path,
        typer.Argument(
            help="An OpenHands SDK conversation folder (base_state.json + events/), or a "
            "folder of them (the SDK's persistence dir)"
        ),
    ],
    store: StoreOption = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Overwrite a conversation already in the store")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one result per folder")] = False,
) -> None:
    """Import OpenHands conversations; print the id of each conversation imported.

    A folder with unreadable files, or a log the store cannot hold (duplicate ids, missing
    parents, a cycle), is not imported at all: its files are named, the next one is tried.
    """
    from treadle.store.base import StoreError
    from treadle.store.openhands import find_conversation_folders, import_conversation

    if not directory.is_dir():
        fail(f"{directory} is not a folder", EXIT_BAD_INPUT)
    folders = find_conversation_folders(directory)
    if not folders:
        fail(
            f"no OpenHands conversation in {directory}: expected base_state.json and events/ "
            "in it or in its sub-folders",
            EXIT_BAD_INPUT,
        )
    event_store = open_store_or_exit(store)
    try:
        results = [import_conversation(event_store, f, replace=replace) for f in folders]
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        event_store.close()
    if as_json:
        print_json([_result_json(result) for result in results])
    else:
        for result in results:
            _report(result)
    if not all(result.imported for result in results):
        raise typer.Exit(EXIT_VIOLATIONS)


@export_app.command("openhands")
def export_openhands(
    conversation: Annotated[
        str, typer.Argument(help="The stored conversation: its id or a unique prefix")
    ],
    directory: Annotated[
        Path, typer.Argument(help="Folder to write (new or empty): the conversation folder")
    ],
    store: StoreOption = None,
) -> None:
    """Write a stored conversation as an OpenHands SDK conversation folder the SDK can load
    (e.g. ``LocalConversation(..., file_store=LocalFileStore(DIR))``, or as
    ``persistence_dir/<id hex>``)."""
    from treadle.cli.ids import resolve_conversation
    from treadle.store.base import ConversationNotFound, StoreError
    from treadle.store.openhands import ExportError, export_conversation

    event_store = open_store_or_exit(store)
    try:
        conversation = resolve_conversation(event_store, conversation)
        written = export_conversation(event_store, conversation, directory)
    except ConversationNotFound:
        fail(f"no conversation {conversation!r} in store {event_store.url}", EXIT_BAD_INPUT)
    except (ExportError, StoreError) as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        event_store.close()
    typer.echo(str(written.folder))
    extra = (
        f"; {written.side_entries} event(s) with Treadle-only fields kept in base_state.json"
        if written.side_entries
        else ""
    )
    typer.echo(
        f"exported {written.event_count} event(s) as SDK conversation "
        f"{written.sdk_conversation_id}{extra}",
        err=True,
    )


def _report(result: ImportResult) -> None:
    """The id on stdout (for scripts); what happened, problems first, on stderr."""
    if result.imported:
        typer.echo(result.conversation_id)
        verb = "replaced" if result.replaced else "imported"
        typer.echo(
            f"{verb} {result.folder} as {result.conversation_id}: {result.event_count} event(s), "
            f"head {result.head or '(empty)'}",
            err=True,
        )
    else:
        typer.echo(f"NOT imported {result.folder}:", err=True)
        for problem in result.problems:
            typer.echo(f"  {problem}", err=True)
    for notice in result.notices:
        typer.echo(f"  note: {notice}", err=True)
    if result.violations:
        contracts = sorted({violation.contract for violation in result.violations})
        typer.echo(
            f"  {len(result.violations)} contract violation(s) ({', '.join(contracts)}): "
            f"see treadle audit {result.folder}",
            err=True,
        )


def _result_json(result: ImportResult) -> dict[str, object]:
    return {
        "folder": str(result.folder),
        "conversation_id": result.conversation_id,
        "imported": result.imported,
        "replaced": result.replaced,
        "event_count": result.event_count,
        "head": result.head,
        "problems": [problem.to_json_dict() for problem in result.problems],
        "notices": [notice.to_json_dict() for notice in result.notices],
        "violations": [violation.to_json_dict() for violation in result.violations],
    }
