"""``treadle show`` (a conversation as a readable transcript), ``treadle delete`` and ``treadle
export markdown|html``: a stored conversation for people rather than for programs.

Exit codes (README, "The command line"): 0 ok, 2 bad input (unknown id, a refused delete).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from treadle.cli.openhands_commands import export_app
from treadle.cli.output import EXIT_BAD_INPUT, fail
from treadle.cli.root import app
from treadle.cli.store_options import StoreOption, open_existing_store

if TYPE_CHECKING:
    from treadle.events.model import Event

ConversationArgument = Annotated[
    str, typer.Argument(help="The stored conversation: its id or a unique prefix")
]
OutputOption = Annotated[
    Path | None, typer.Option("-o", "--output", help="File to write (default: stdout)")
]


def _read(store: str | None, conversation: str) -> tuple[str, str, list[Event]]:
    """(id, title, active path) of the conversation ``conversation`` names."""
    from treadle.cli.ids import resolve_conversation
    from treadle.store.base import StoreError

    opened = open_existing_store(store)
    try:
        found = resolve_conversation(opened, conversation)
        info = opened.get_conversation(found)
        path = opened.path_to_root(found)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        opened.close()
    return found, info.title or found, path


@app.command("show")
def show(
    conversation: ConversationArgument,
    store: StoreOption = None,
    full: Annotated[
        bool, typer.Option("--full", help="Every line of every output, every argument")
    ] = False,
) -> None:
    """Print a stored conversation's active path as a transcript: messages, each tool call
    with its result (long outputs folded), the final answer as Markdown."""
    from treadle.cli.terminal_text import visible
    from treadle.cli.transcript import print_transcript, transcript

    found, title, path = _read(store, conversation)
    console = Console(highlight=False)
    console.rule(f"{visible(title)} ({found})", style="bold")
    print_transcript(console, transcript(path, full=full))


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as error:
        fail(f"cannot write {output}: {error.strerror or error}", EXIT_BAD_INPUT)
    typer.echo(f"wrote {output}", err=True)


@export_app.command("markdown")
def export_markdown(
    conversation: ConversationArgument,
    store: StoreOption = None,
    output: OutputOption = None,
    full: Annotated[bool, typer.Option("--full", help="Outputs unfolded")] = False,
) -> None:
    """Write a conversation's transcript as Markdown (what `treadle show` prints)."""
    from treadle.cli.transcript import final_answer, to_markdown, transcript

    _found, title, path = _read(store, conversation)
    _write(to_markdown(title, transcript(path, full=full), final_answer(path)), output)


@export_app.command("html")
def export_html(
    conversation: ConversationArgument,
    store: StoreOption = None,
    output: OutputOption = None,
    full: Annotated[bool, typer.Option("--full", help="Outputs unfolded")] = False,
) -> None:
    """Write a conversation's transcript as one self-contained HTML page."""
    from treadle.cli.transcript import final_answer, to_html, transcript

    _found, title, path = _read(store, conversation)
    _write(to_html(title, transcript(path, full=full), final_answer(path)), output)


@app.command("delete")
def delete(
    conversation: ConversationArgument,
    store: StoreOption = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask (needed without a terminal)")
    ] = False,
) -> None:
    """Delete a stored conversation: its events and its workspace snapshots. The workspace's
    files are never touched. Refused while a run holds it."""
    from treadle.cli.ids import resolve_conversation
    from treadle.errors import TreadleError
    from treadle.runtime.snapshots import open_snapshot_store
    from treadle.store.lease_holder import HeldLease, LeaseTaken
    from treadle.store.leases import CLI, new_owner, open_leases
    from treadle.store.urls import default_store_dir

    opened = open_existing_store(store)
    try:
        found = resolve_conversation(opened, conversation)
        info = opened.get_conversation(found)
        evals = _eval_results_of(opened.url, found)
        if not yes:
            if not sys.stdin.isatty():
                fail(
                    f"delete conversation {found}: no terminal to ask; give --yes to delete it",
                    EXIT_BAD_INPUT,
                )
            typer.confirm(
                f"delete conversation {found} ({info.title or 'untitled'}, "
                f"{info.event_count} events)? its workspace files stay"
                + (f"; it is the trajectory of {evals}" if evals else ""),
                abort=True,
            )
        lease = HeldLease(open_leases(opened.url), found, new_owner(CLI))
        try:
            with lease:  # no run may be writing it while it goes
                opened.delete_conversation(found)
                objects = open_snapshot_store(opened, default_store_dir())
                if objects is not None:  # its snapshots' files go at the next gc
                    objects.forget(found)
        except LeaseTaken as error:
            fail(f"{error}: stop that run first; nothing was deleted", EXIT_BAD_INPUT)
        finally:
            lease.leases.close()
    except TreadleError as error:
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        opened.close()
    typer.echo(f"deleted conversation {found} ({info.event_count} events)", err=True)
    if evals:
        typer.echo(
            f"{evals} keeps its result (patch, verification, usage); its trajectory is gone",
            err=True,
        )


def _eval_results_of(url: str, conversation_id: str) -> str:
    """The eval task results whose attempt the conversation is, said in words ("" if none)."""
    from treadle.store.base import StoreError
    from treadle.store.eval_results import open_eval_results

    try:
        results = open_eval_results(url)
    except StoreError:
        return ""  # a store without eval tables cannot have any
    try:
        found = results.results_of(conversation_id)
    finally:
        results.close()
    named = [f"eval {e} task {t}" + (f" (epoch {n})" if n > 1 else "") for e, t, n in found]
    return ", ".join(named)
