"""``treadle chat [TASK]``: an interactive session in a terminal on one conversation.

Type a message, watch it run (``treadle run``'s live view), answer the calls that wait for
confirmation with y/n, type again. Ctrl-C during a run stops it (recorded, as ``treadle run``
does); at the prompt a second Ctrl-C, or Ctrl-D, leaves. ``-c`` continues the workspace's last
conversation, ``--conversation ID`` a given one. Each message is one ``treadle run`` turn: the
conversation is opened from its stored settings and run under its run lease, then closed, so
another process (a server, ``treadle run``) can take it between turns.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from treadle.cli.output import EXIT_BAD_INPUT, fail
from treadle.cli.root import app
from treadle.cli.run_commands import SandboxKind, _ModelOptions, _SandboxOptions
from treadle.cli.store_options import StoreOption
from treadle.data.choices import ConfirmationPolicy

if TYPE_CHECKING:  # the rest is imported by the command (cli/root.py)
    from treadle.data.settings import ModelChoice
    from treadle.runtime.conversation import Conversation
    from treadle.runtime.settings import ConversationSettings
    from treadle.store.base import EventStore

PROMPT = "you> "
LEAVE_HINT = "(Ctrl-C again or Ctrl-D to leave)"


@app.command()
def chat(
    task: Annotated[
        str | None,
        typer.Argument(help="The first message (else asked for at the prompt)", show_default=False),
    ] = None,
    continue_last: Annotated[
        bool,
        typer.Option(
            "-c",
            "--continue",
            help="Continue the last conversation of the workspace (--workspace, default the "
            "current folder)",
        ),
    ] = False,
    conversation_id: Annotated[
        str | None,
        typer.Option("--conversation", help="Continue this stored conversation (id or prefix)"),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option("--workspace", help="Folder the tools act in [default: the current folder]"),
    ] = None,
    create_workspace: Annotated[
        bool,
        typer.Option(
            "--create-workspace", help="Create the --workspace folder when it does not exist"
        ),
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", help="LiteLLM model name (or TREADLE_MODEL)")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="OpenAI-compatible base URL (or TREADLE_BASE_URL)"),
    ] = None,
    script: Annotated[
        Path | None, typer.Option("--script", help="Use a scripted model from this JSON file")
    ] = None,
    confirm: Annotated[
        ConfirmationPolicy | None,
        typer.Option("--confirm", help="Which calls wait for your y/n [default: never]"),
    ] = None,
    sandbox: Annotated[
        SandboxKind | None,
        typer.Option(
            "--sandbox",
            help="bubblewrap (only the workspace is writable) or none [default: bubblewrap]",
        ),
    ] = None,
    max_steps: Annotated[
        int, typer.Option("--max-steps", min=1, help="Model calls per message at most")
    ] = 50,
    store: StoreOption = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file",
            help="File holding the model's API key (else TREADLE_API_KEY); kept out of argv",
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option("-q", "--quiet", help="Leave the state changes out of the live view"),
    ] = False,
) -> None:
    """An interactive session on one conversation: type a message, watch it run, confirm
    or reject waiting calls with y/n, type the next. Ctrl-C stops a run; at the prompt a
    second Ctrl-C, or Ctrl-D, leaves."""
    from treadle.cli.ids import resolve_conversation
    from treadle.cli.last_conversation import last_conversation_id
    from treadle.cli.model_checks import key_from_file
    from treadle.cli.run_commands import _quiet_logs, _workspace_folder
    from treadle.cli.store_options import open_existing_store, open_store_or_exit

    if continue_last and conversation_id is not None:
        fail("give -c/--continue or --conversation ID, not both", EXIT_BAD_INPUT)
    console = Console(highlight=False)
    _quiet_logs()
    key_from_file(api_key_file)
    choice = _ModelOptions(model, base_url, script, confirm, None)
    sandbox_choice = _SandboxOptions(sandbox, None, ())
    if continue_last or conversation_id is not None:
        opened = open_existing_store(store)
        session = _Session(console, opened, choice, sandbox_choice, max_steps, quiet)
        session.workspace = workspace  # checked against the stored one
        if conversation_id is None:
            session.id = last_conversation_id(opened, workspace)
        else:
            session.id = resolve_conversation(opened, conversation_id)
        console.print(f"[dim]conversation {session.id}[/]")
    else:
        folder = _workspace_folder(workspace, create_workspace)
        session = _Session(
            console, open_store_or_exit(store), choice, sandbox_choice, max_steps, quiet
        )
        session.workspace = folder
    try:
        session.loop(task)
    finally:
        session.store.close()


_WAKE_EVERY_S = 0.2


@contextlib.contextmanager
def _woken_while_waiting() -> Iterator[None]:
    """A no-op SIGALRM every 0.2 s while the prompt waits for a line.

    Python runs a signal's handler only when the main thread next runs, and the read at the
    prompt (readline's select) wakes only when a signal interrupts it. A Ctrl-C that lands
    just before the read starts, or on another thread, interrupts nothing: it was left
    pending until the next key. Each alarm interrupts the read, which then runs what is
    pending (KeyboardInterrupt) or goes on reading."""
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, _WAKE_EVERY_S, _WAKE_EVERY_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Session:
    """One chat: the store, the conversation (made on the first message when ``id`` is
    None), the model options (a new conversation's, or the model a continued one switches
    to on its first turn) and the sandbox options (every turn's)."""

    def __init__(
        self,
        console: Console,
        store: EventStore,
        choice: _ModelOptions,
        sandbox: _SandboxOptions,
        max_steps: int,
        quiet: bool,
    ) -> None:
        self.console = console
        self.store = store
        self.choice = choice
        self.sandbox = sandbox
        self.max_steps = max_steps
        self.quiet = quiet
        self.id: str | None = None
        self.workspace: Path | None = None

    def loop(self, task: str | None) -> None:
        """Turns until EOF or a second Ctrl-C at the prompt."""
        message = task
        while True:
            if message is None:
                message = self._read_message()
                if message is None:
                    return
            if message.strip():
                self.turn(message)
            message = None

    def _read_message(self) -> str | None:
        """The next message typed at the prompt; None to leave (Ctrl-D, or Ctrl-C twice)."""
        # Ctrl-C at the prompt is ours to count (treadle.entry's start-up handler would
        # exit; a run's handler was put back when the run ended).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupted = False
        while True:
            try:
                try:
                    with _woken_while_waiting():
                        return input(PROMPT)
                except KeyboardInterrupt:
                    if interrupted:
                        break
                    interrupted = True
                    self.console.print(f"\n{LEAVE_HINT}")
            except (KeyboardInterrupt, EOFError):
                # EOF; or the second Ctrl-C, which may come while the hint is written
                break
        with contextlib.suppress(KeyboardInterrupt):  # a third: leaving already
            self.console.print()
        return None

    def turn(self, message: str) -> None:
        """One message, run as ``treadle run`` runs it (live view, y/n for waiting calls,
        Ctrl-C stops it), under the run lease."""
        from treadle.cli.run_commands import _run_under_lease, _unlimited

        conversation, to_store, new_model = self._open(message)
        _run_under_lease(
            self.console,
            self.store,
            conversation,
            message,
            self.max_steps,
            to_store,
            _unlimited(),
            new_model,
        )

    def _open(
        self, message: str
    ) -> tuple[Conversation, ConversationSettings | None, ModelChoice | None]:
        from treadle.cli.live_output import LiveOutputView
        from treadle.cli.live_view import LiveView
        from treadle.cli.run_commands import (
            _continue,
            _new_settings,
            cli_policy,
            model_key_from_env,
        )
        from treadle.errors import TreadleError
        from treadle.runtime.conversation import Conversation

        to_store: ConversationSettings | None = None
        new_model: ModelChoice | None = None
        if self.id is None:  # the first message makes the conversation
            assert self.workspace is not None
            settings, chosen = _new_settings(
                self.console, self.workspace, self.choice, self.sandbox
            )
            try:
                conversation = Conversation.create(
                    self.store,
                    settings,
                    title=message[:80],
                    model=chosen,
                    callbacks=[LiveView(self.console)],
                    model_key=model_key_from_env(),
                    policy=cli_policy(),
                )
            except TreadleError as error:
                fail(str(error), EXIT_BAD_INPUT)
            self.id = conversation.id
            self.console.print(f"[dim]conversation {conversation.id}[/]")
        else:
            conversation, to_store, new_model = _continue(
                self.console, self.store, self.id, self.workspace, self.choice, self.sandbox
            )
        # Made (or switched to) once: later turns run with the stored model and settings.
        self.choice = _ModelOptions(None, None, None, None, None)
        self.workspace = None
        conversation.output_listeners.append(LiveOutputView(self.console))
        if self.quiet:
            for callback in conversation.callbacks:
                if isinstance(callback, LiveView):
                    callback.show_state = False
        return conversation, to_store, new_model
