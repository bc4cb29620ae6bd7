"""``treadle run`` (a real agent run with a live view) and ``treadle demo`` (a scripted one).

Both end with a summary: status, steps, tokens, cost; the demo also prints the active path,
the projection the model gets and the audit of the stored log.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.panel import Panel

from treadle.cli.app import app
from treadle.cli.live_view import LiveView, describe
from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail
from treadle.cli.store_options import StoreOption, open_store_or_exit
from treadle.errors import TreadleError
from treadle.events.audit import audit_events
from treadle.events.projection import count_tool_calls
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.conversation import Conversation
from treadle.runtime.llm import ModelError
from treadle.runtime.llm.base import LanguageModel
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus
from treadle.store.lease_holder import HeldLease
from treadle.store.leases import CLI, new_owner, open_leases

EXIT_STOPPED = 3
"""Exit 3: stopped before the end (interrupted, paused, max steps, a confirmation nobody gave)."""


@contextmanager
def _signals_stop_the_run() -> Iterator[None]:
    """SIGINT and SIGTERM become a KeyboardInterrupt naming the signal, so the run closes its
    open calls and records the stop; later signals are ignored while that is written."""
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}

    def stop(number: int, _frame: FrameType | None) -> None:
        for each in previous:
            signal.signal(each, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(number).name)

    for number in previous:
        signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _summary(console: Console, conversation: Conversation) -> None:
    path = conversation.active_path()
    steps = sum(1 for e in path if e.kind == "action" and e.usage is not None) + sum(
        1 for e in path if e.kind == "message" and e.source == "agent"
    )
    usages = [e.usage for e in path if getattr(e, "usage", None) is not None]
    tokens_in = sum(u.prompt_tokens for u in usages)
    tokens_out = sum(u.completion_tokens for u in usages)
    cost = sum(u.cost_usd for u in usages)
    reason = f" ({conversation.status_reason})" if conversation.status_reason else ""
    console.print(
        Panel.fit(
            f"status: [bold]{conversation.status.value}[/]{reason}\n"
            f"model steps: {steps}   events on the active path: {len(path)}\n"
            f"tokens: {tokens_in} in / {tokens_out} out   cost: ${cost:.4f}\n"
            f"conversation: {conversation.id}",
            title="summary",
        )
    )


def _ask_user(console: Console, conversation: Conversation) -> bool:
    """Confirm or reject each pending call at the terminal; False when nobody can answer."""
    if not sys.stdin.isatty():
        console.print(
            "[yellow]waiting for confirmation[/]; no terminal to ask: continue with a client "
            "or the server (treadle serve)"
        )
        return False
    for action in conversation.pending_actions():
        answer = typer.prompt(f"run {describe(action)}? [y/n]", default="y")
        if answer.strip().lower().startswith("y"):
            conversation.confirm([action.id])
        else:
            conversation.reject([action.id], reason="rejected at the terminal")
    return True


@app.command()
def run(
    task: Annotated[str, typer.Argument(help="What the agent should do")],
    workspace: Annotated[
        Path, typer.Option("--workspace", help="Folder the tools act in (no isolation!)")
    ],
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
        ConfirmationPolicy, typer.Option("--confirm", help="Which calls wait for you")
    ] = ConfirmationPolicy.NEVER,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1)] = 50,
    model_deadline: Annotated[
        float | None,
        typer.Option(
            "--model-deadline",
            min=0.001,
            help="Seconds one model call may take, retries included "
            "(or TREADLE_MODEL_DEADLINE; default 600)",
        ),
    ] = None,
    store: StoreOption = None,
) -> None:
    """Run an agent on TASK in a workspace, showing every event as it is stored.

    Ctrl-C or SIGTERM stops the run cleanly: open calls are closed, the stop is recorded and
    the summary printed (exit 3)."""
    console = Console(highlight=False)
    _quiet_logs()
    chosen_model: LanguageModel | None = None
    try:
        if script is not None:
            settings = ConversationSettings.scripted(script, workspace, confirmation=confirm)
        else:
            from treadle.runtime.llm import LiteLLMModel, ModelSettings

            chosen = ModelSettings.from_env(
                model=model, base_url=base_url, deadline_s=model_deadline
            )
            settings = ConversationSettings.litellm(
                chosen.model, workspace, chosen.base_url, confirmation=confirm
            )
            chosen_model = LiteLLMModel(
                chosen, on_retry=lambda notice: console.print(f"[yellow]retry[/] {notice}")
            )
    except ModelError as error:
        fail(str(error), EXIT_BAD_INPUT)
    opened = open_store_or_exit(store)
    try:
        conversation = Conversation.create(
            opened, settings, title=task[:80], model=chosen_model, callbacks=[LiveView(console)]
        )
        # Like a server, a CLI run holds the run lease: if this process dies, the lease
        # expires and every reader sees the run as interrupted (no server takes it over).
        lease = HeldLease(
            open_leases(opened.url), conversation.id, new_owner(CLI), on_lost=conversation.pause
        )
    except TreadleError as error:
        fail(str(error), EXIT_BAD_INPUT)
    with conversation:
        try:
            with lease, _signals_stop_the_run():
                status = _run_to_the_end(console, conversation, task, max_steps)
        except KeyboardInterrupt as stop:
            console.print(f"[yellow]stopped by {stop or 'an interrupt'}[/]")
            status = ConversationStatus.PAUSED  # what was recorded, or would have been
        except TreadleError as error:  # the store failed and could not record it
            fail(f"the run of conversation {conversation.id} stopped: {error}", 1)
        finally:
            lease.leases.close()
        _summary(console, conversation)
    opened.close()
    raise typer.Exit(_exit_code(status, conversation.status_reason))


def _quiet_logs() -> None:
    """What the run says goes to the screen through the live view, the retry notices and the
    summary; log records (meant for servers) would only repeat it, with tracebacks."""
    logging.getLogger("treadle").addHandler(logging.NullHandler())
    logging.getLogger("treadle").propagate = False


def _run_to_the_end(
    console: Console, conversation: Conversation, task: str, max_steps: int
) -> ConversationStatus:
    conversation.send_message(task)
    status = conversation.run(max_steps)
    while status is ConversationStatus.WAITING_FOR_CONFIRMATION and _ask_user(
        console, conversation
    ):
        status = conversation.run(max_steps)
    return status


def _exit_code(status: ConversationStatus, reason: str | None) -> int:
    """Exit codes: 0 finished (or idle), 1 ERROR or STUCK, 3 stopped before the end."""
    if status in (ConversationStatus.ERROR, ConversationStatus.STUCK):
        return 1
    if status in (ConversationStatus.PAUSED, ConversationStatus.WAITING_FOR_CONFIRMATION):
        return EXIT_STOPPED
    if status is ConversationStatus.IDLE and (reason or "").startswith("stopped after"):
        return EXIT_STOPPED  # max steps reached
    return 0


@app.command()
def demo(store: StoreOption = None) -> None:
    """A scripted run with real tools in a temporary workspace: parallel calls whose results
    complete out of order, an invalid call answered by an agent error, confirmations; then the
    active path, the projection and the audit."""
    console = Console(highlight=False)
    workspace = Path(tempfile.mkdtemp(prefix="treadle-demo-"))
    script = resources.files("treadle.demo").joinpath("script.json")
    settings = ConversationSettings.scripted(
        str(script), workspace, confirmation=ConfirmationPolicy.RISKY
    )
    opened = open_store_or_exit(store)
    console.rule("Treadle demo")
    console.print(f"store: {opened.url}\nworkspace: {workspace} (a local folder: no isolation)")
    with Conversation.create(
        opened, settings, title="treadle demo", callbacks=[LiveView(console)]
    ) as conversation:
        conversation.send_message("Write notes.txt in the workspace, then edit its second line.")
        status = conversation.run()
        first_wait = True
        while status is ConversationStatus.WAITING_FOR_CONFIRMATION:
            pending = conversation.pending_actions()
            console.print(
                f"[magenta]waiting for confirmation[/]: {', '.join(a.tool_call_id for a in pending)}"
            )
            if first_wait and len(pending) > 1:
                # Confirm the second call first: its result is stored before the first's.
                first_wait = False
                conversation.confirm([pending[-1].id])
                left = [a.tool_call_id for a in conversation.pending_actions()]
                console.print(
                    f"[magenta]confirmed {pending[-1].tool_call_id}; pending now[/]: {left}"
                )
            conversation.confirm()
            status = conversation.run()
        _show_results(console, conversation)
        _summary(console, conversation)
    opened.close()
    if status is not ConversationStatus.FINISHED:
        fail(f"the demo ended {status.value}, not finished", EXIT_VIOLATIONS)


def _show_results(console: Console, conversation: Conversation) -> None:
    path = conversation.active_path()
    console.rule("active path (root .. head)")
    for event in path:
        console.print(f"{event.kind:<15} {describe(event)}")
    console.rule("projection: what the model is sent next")
    messages = conversation.messages()
    actions = sum(1 for event in path if event.kind == "action")
    for message in messages:
        calls = message.get("tool_calls")
        detail = f"{len(calls)} tool call(s)" if calls else json.dumps(message.get("content"))[:90]
        extra = f" answers {message['tool_call_id']}" if message["role"] == "tool" else ""
        console.print(f"{message['role']:<10} {detail}{extra}")
    console.print(
        f"{len(path)} events -> {len(messages)} messages; "
        f"tool calls: {actions} actions in, {count_tool_calls(messages)} calls out (PROJECT-CONSERVE)"
    )
    console.rule("audit of the whole stored log")
    stored = conversation.store.get_range(conversation.id, 0, 1_000_000)
    report = audit_events([item.event for item in stored])
    verdict = "[bold green]clean[/]" if report.clean else "[bold red]violations[/]"
    console.print(f"{verdict}: {len(report.violations)} violations, pending {report.pending}")
    for violation in report.violations:
        console.print(f"  {violation.contract}: {violation.message}")
    console.print(f"counts: {dict(sorted(report.counts.items()))}")
