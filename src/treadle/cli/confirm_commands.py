"""``treadle confirm CID [CALL...]`` and ``treadle reject CID [CALL...] --reason TEXT``: the
answer to calls waiting for confirmation without a terminal to ask at (a ``treadle run`` that
ended waiting, exit 3), as the server's ``POST /confirm`` and ``/reject`` give it: under the
conversation's run lease, the confirmed calls run here (shown as ``treadle run`` shows them),
then the status they leave is printed (idle: every call answered, ``treadle run
--conversation CID`` goes on). CALL is an action id or a tool call id; none: all pending."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from treadle.cli.ids import MIN_PREFIX, resolve_conversation
from treadle.cli.live_view import LiveView, describe
from treadle.cli.output import EXIT_BAD_INPUT, fail
from treadle.cli.root import app
from treadle.cli.run_commands import (
    _exit_code,
    _quiet_logs,
    _signals_stop_the_run,
    cli_policy,
    model_key_from_env,
)
from treadle.cli.store_options import StoreOption, open_existing_store
from treadle.data.status import ConversationStatus
from treadle.errors import TreadleError

if TYPE_CHECKING:  # the rest is imported by the function that uses it (cli/root.py)
    from treadle.runtime.conversation import Conversation
    from treadle.store.base import EventStore

ConversationArg = Annotated[
    str, typer.Argument(help="The conversation waiting for an answer (its id or a unique prefix)")
]
CallsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Action ids or tool call ids of pending calls, or unique prefixes (default: all)"
    ),
]


@app.command()
def confirm(
    conversation_id: ConversationArg, calls: CallsArg = None, store: StoreOption = None
) -> None:
    """Run pending calls that wait for confirmation (all of them by default)."""
    _answer(conversation_id, calls, store, None)


@app.command()
def reject(
    conversation_id: ConversationArg,
    calls: CallsArg = None,
    reason: Annotated[
        str, typer.Option("--reason", help="Why, as the model is told")
    ] = "User rejected the action",
    store: StoreOption = None,
) -> None:
    """Answer pending calls that wait for confirmation with a rejection (all by default)."""
    _answer(conversation_id, calls, store, reason)


def _answer(
    conversation_id: str, calls: list[str] | None, store_url: str | None, reason: str | None
) -> None:
    from treadle.runtime.status import read_status

    console = Console(highlight=False)
    _quiet_logs()
    opened = open_existing_store(store_url)
    try:
        conversation_id = resolve_conversation(opened, conversation_id)
        status = _answer_in(console, opened, conversation_id, calls, reason)
        why = read_status(opened, conversation_id)[1]
    finally:
        opened.close()
    raise typer.Exit(_exit_code(status, why))


def _answer_in(
    console: Console,
    store: EventStore,
    conversation_id: str,
    calls: list[str] | None,
    reason: str | None,
) -> ConversationStatus:
    from treadle.runtime.conversation import Conversation
    from treadle.store.lease_holder import HeldLease, LeaseTaken
    from treadle.store.leases import CLI, new_owner, open_leases

    try:
        conversation = Conversation.open(
            store,
            conversation_id,
            callbacks=[LiveView(console)],
            model_key=model_key_from_env(),
            policy=cli_policy(),
        )
    except TreadleError as error:
        fail(str(error), EXIT_BAD_INPUT)
    with conversation:
        lease = HeldLease(
            open_leases(store.url), conversation.id, new_owner(CLI), on_lost=conversation.pause
        )
        try:
            with lease, _signals_stop_the_run():
                chosen = _action_ids(conversation, calls)
                conversation.check_pending(chosen)  # under the lease: nobody runs them
                if reason is None:
                    status = conversation.confirm(chosen)
                else:
                    status = conversation.reject(chosen, reason=reason)
                conversation.deliver_queued_messages()
        except LeaseTaken as error:
            fail(f"{error}: wait for that run to end, or stop it there", EXIT_BAD_INPUT)
        except KeyboardInterrupt as stop:
            console.print(f"[yellow]stopped by {str(stop) or 'an interrupt'}[/]")
            status = ConversationStatus.PAUSED
        except TreadleError as error:  # nothing pending, not waiting, unknown call
            fail(str(error), EXIT_BAD_INPUT)
        finally:
            lease.leases.close()
        _say_status(console, conversation)
    return status


def _action_ids(conversation: Conversation, calls: list[str] | None) -> list[str] | None:
    """The action ids ``calls`` name (an action id or a tool call id, whole or a unique prefix
    of at least ``MIN_PREFIX`` characters); unknown ones as given, for ``check_pending`` to
    refuse with the list of pending calls. An ambiguous prefix exits 2 naming the calls."""
    if not calls:
        return None
    pending = conversation.pending_actions()
    by_name = {action.id: action.id for action in pending}
    by_name.update({action.tool_call_id: action.id for action in pending})
    chosen = []
    for call in calls:
        if call in by_name or len(call) < MIN_PREFIX:
            chosen.append(by_name.get(call, call))
            continue
        named = sorted({action for name, action in by_name.items() if name.startswith(call)})
        if len(named) > 1:
            fail(
                f"call prefix {call!r} is ambiguous in conversation {conversation.id}: it "
                f"starts {', '.join(named)}; give more characters",
                EXIT_BAD_INPUT,
            )
        chosen.append(named[0] if named else call)
    return chosen


def _say_status(console: Console, conversation: Conversation) -> None:
    status, why = conversation.stored_status()
    console.print(f"status: [bold]{status.value}[/]" + (f" ({escape(why)})" if why else ""))
    pending = conversation.pending_actions()
    if pending and status is not ConversationStatus.RUNNING:
        console.print("still waiting for an answer: " + ", ".join(describe(a) for a in pending))
    elif status is ConversationStatus.IDLE:
        console.print(f"continue with: treadle run --conversation {conversation.id}")
