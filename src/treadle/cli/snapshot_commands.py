"""``treadle switch``, ``fork``, ``restore``, ``diff`` and ``snapshots``: branches that carry
the workspace's files (docs/snapshots.md).

Exit codes (README, "The command line"): 0 ok; 2 bad input, an unknown conversation, event or
snapshot, no snapshot covering the event (nothing changed), or a run holding the conversation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from treadle.cli.ids import resolve, resolve_conversation, resolve_event, short_ids
from treadle.cli.output import EXIT_BAD_INPUT, fail, print_json
from treadle.cli.root import app
from treadle.cli.store_commands import all_conversations
from treadle.cli.store_options import StoreOption, open_existing_store
from treadle.errors import TreadleError

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from treadle.data.views import RestoreView
    from treadle.runtime.conversation import Conversation
    from treadle.runtime.settings import SettingsPolicy
    from treadle.store.base import EventStore

ConversationArgument = Annotated[
    str, typer.Argument(help="The conversation: its id or a unique prefix")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
RestoreOption = Annotated[
    bool,
    typer.Option(
        "--restore-files",
        help="Also put the workspace's files back to the snapshot covering EVENT (the files "
        "as they are are snapshotted first: treadle restore undoes it)",
    ),
]


def _policy() -> SettingsPolicy:
    # The edge: where a store without a file of its own (PostgreSQL) keeps its snapshots.
    from treadle.runtime.settings import HostProvides, SettingsPolicy
    from treadle.store.urls import default_store_dir

    return SettingsPolicy(provides=HostProvides(snapshot_data_dir=default_store_dir()))


@contextmanager
def _store(url: str | None) -> Iterator[EventStore]:
    opened = open_existing_store(url)
    try:
        yield opened
    except TreadleError as error:  # unknown conversation/event, no snapshot, busy ...
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        opened.close()


@contextmanager
def _held(opened: EventStore, conversation_id: str) -> Iterator[Conversation]:
    """The conversation, opened holding its run lease: refused (exit 2) while a run, here or
    in a server, holds it."""
    from treadle.runtime.conversation import Conversation
    from treadle.store.lease_holder import HeldLease, LeaseTaken
    from treadle.store.leases import CLI, new_owner, open_leases

    opened.get_conversation(conversation_id)  # ConversationNotFound before any lease
    lease = HeldLease(open_leases(opened.url), conversation_id, new_owner(CLI))
    try:
        with lease, Conversation.open(opened, conversation_id, policy=_policy()) as conversation:
            yield conversation
    except LeaseTaken as error:
        fail(f"{error}: the files are not changed while a run is active", EXIT_BAD_INPUT)
    finally:
        lease.leases.close()


def _restored_lines(result: RestoreView) -> list[str]:
    lines = [
        f"restored snapshot {result.snapshot} ({len(result.changed)} file(s) changed); the "
        f"files as they were are snapshot {result.previous_snapshot} "
        "(treadle restore puts them back)"
    ]
    lines += [f"  {path}" for path in result.changed]
    lines += [f"  kept (not in any snapshot, not overwritten): {path}" for path in result.kept]
    return lines


@app.command("switch")
def switch(
    conversation: ConversationArgument,
    event: Annotated[
        str, typer.Argument(help="The event that becomes the head (its id or a unique prefix)")
    ],
    restore_files: RestoreOption = False,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make EVENT the head of CONVERSATION (its branch becomes the model's context); with
    --restore-files the workspace's files go back to that point too."""
    with _store(store) as opened:
        conversation = resolve_conversation(opened, conversation)
        event = resolve_event(opened, conversation, event)
        with _held(opened, conversation) as conv:
            result = conv.switch_branch(event, restore_files=restore_files)
    if as_json:
        print_json({"head": event, "restore": result.model_dump(mode="json") if result else None})
        return
    typer.echo(f"head of {conversation} is now {event}")
    if result is None:
        typer.echo("the workspace's files were not changed (--restore-files restores them)")
    else:
        typer.echo("\n".join(_restored_lines(result)))


@app.command("fork")
def fork(
    conversation: ConversationArgument,
    event: Annotated[
        str, typer.Argument(help="The event the fork starts from (its id or a unique prefix)")
    ],
    restore_files: RestoreOption = False,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="The fork's own workspace (created if missing; needed by --restore-files); "
            "default: it shares the conversation's",
        ),
    ] = None,
    title: Annotated[str | None, typer.Option("--title")] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """A new conversation holding CONVERSATION's path up to EVENT (and its snapshots); with
    --restore-files and --workspace DIR, DIR gets the files as they were at EVENT."""
    from treadle.runtime.conversation import Conversation

    if restore_files and workspace is None:
        fail(
            "--restore-files needs --workspace DIR: a fork shares its parent's workspace "
            "otherwise, whose files would change under the parent",
            EXIT_BAD_INPUT,
        )
    with _store(store) as opened:
        conversation = resolve_conversation(opened, conversation)
        event = resolve_event(opened, conversation, event)
        with Conversation.open(opened, conversation, policy=_policy()) as parent:
            child = parent.fork(
                event,
                title=title,
                restore_files=restore_files,
                workspace=str(workspace.resolve()) if workspace is not None else None,
            )
            with child:
                restores = _restore_facts(opened, child.id)
                root = str(child.workspace.root)
    if as_json:
        print_json(
            {"id": child.id, "workspace": root, "restore": restores[-1] if restores else None}
        )
        return
    typer.echo(f"forked {conversation} at {event} as {child.id} (workspace {root})")
    if restores:
        done = restores[-1]
        typer.echo(
            f"restored snapshot {done['snapshot']} into {root}: "
            f"{done['changed_count']} file(s) written"
        )


def _restore_facts(opened: EventStore, conversation_id: str) -> list[dict[str, Any]]:
    from treadle.runtime.snapshots.facts import RESTORE_KEY, facts

    return [
        dict(event.value)
        for _seq, event in facts(opened, conversation_id, RESTORE_KEY)
        if isinstance(event.value, dict) and event.value.get("phase") == "done"
    ]


@app.command("restore")
def restore(
    conversation: ConversationArgument,
    snapshot: Annotated[
        str, typer.Argument(help="A snapshot id recorded in the conversation (or its prefix)")
    ],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Put a recorded snapshot of CONVERSATION back into its workspace (the undo of a
    restore: name the snapshot it took first). The head does not move."""
    from treadle.runtime.snapshots import snapshot_facts

    with _store(store) as opened:
        conversation = resolve_conversation(opened, conversation)
        ids = {fact.id for fact in snapshot_facts(opened, conversation)}
        where = f"conversation {conversation} (treadle snapshots lists them); nothing was changed"
        chosen = resolve(snapshot, ids, "snapshot", where)
        with _held(opened, conversation) as conv:
            result = conv.restore_snapshot(chosen)
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        typer.echo("\n".join(_restored_lines(result)))


@app.command("diff")
def diff(
    conversation: ConversationArgument,
    event_a: Annotated[str, typer.Argument(help="The earlier event (its id or a unique prefix)")],
    event_b: Annotated[str, typer.Argument(help="The later event (its id or a unique prefix)")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """The unified diff of the workspace's files from EVENT_A to EVENT_B (from the snapshots
    covering them; exit 2 when one has none)."""
    from treadle.runtime.snapshots import events_diff, open_snapshot_store
    from treadle.store.urls import default_store_dir

    with _store(store) as opened:
        conversation = resolve_conversation(opened, conversation)
        event_a = resolve_event(opened, conversation, event_a)
        event_b = resolve_event(opened, conversation, event_b)
        objects = open_snapshot_store(opened, default_store_dir())
        found = events_diff(opened, objects, conversation, event_a, event_b)
    if as_json:
        print_json(found.model_dump(mode="json"))
    elif found.diff:
        typer.echo(found.diff, nl=False)


@app.command("snapshots")
def snapshots(
    conversation: ConversationArgument,
    gc: Annotated[
        bool,
        typer.Option(
            "--gc",
            help="Also drop the stored files no snapshot of a stored conversation holds "
            "(those of deleted conversations)",
        ),
    ] = False,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """The workspace snapshots of CONVERSATION: id, the event it follows, files and bytes it
    holds, bytes it added to the store."""
    from treadle.runtime.snapshots import open_snapshot_store, snapshot_list
    from treadle.store.urls import default_store_dir

    with _store(store) as opened:
        conversation = resolve_conversation(opened, conversation)
        objects = open_snapshot_store(opened, default_store_dir())
        listed = snapshot_list(opened, objects, conversation)
        # The events as the short prefixes `treadle switch` and `restore` take (unique among
        # the conversation's events): a line fits 80 columns.
        events = short_ids(
            (item["after_event"] for item in listed if item["after_event"]),
            (shape.id for shape in opened.shapes(conversation)),
        )
        collected = None
        if gc and objects is not None:
            live = {info.id for info in all_conversations(opened)}
            dropped = sum(objects.forget(name) for name in objects.owners() if name not in live)
            before, after = objects.gc()
            collected = {"refs_dropped": dropped, "bytes_before": before, "bytes_after": after}
    if as_json:
        print_json({"conversation": conversation, "snapshots": listed, "gc": collected})
        return
    shown = short_ids(item["id"] for item in listed)
    for item in listed:
        reason = f"  ({item['reason']})" if item["reason"] else ""
        typer.echo(
            f"{shown[item['id']]}  after {events.get(item['after_event'], item['after_event'])}"
            f"  {item['files']} file(s)  "
            f"{item['bytes']} bytes  +{item['bytes_added']} bytes added{reason}"
        )
    typer.echo(f"{len(listed)} snapshot(s)")
    if collected is not None:
        typer.echo(
            f"gc: {collected['refs_dropped']} snapshot ref(s) of deleted conversations dropped; "
            f"store {collected['bytes_before']} -> {collected['bytes_after']} bytes"
        )
