"""``treadle run`` (a real agent run with a live view) and ``treadle demo`` (a scripted one).

Both end with a summary: status, steps, tokens, cost; the demo also prints the active path,
the projection the model gets and the audit of the stored log.
"""

from __future__ import annotations

import json
import sys
import tempfile
from importlib import resources
from pathlib import Path
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
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus


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
    store: StoreOption = None,
) -> None:
    """Run an agent on TASK in a workspace, showing every event as it is stored."""
    console = Console(highlight=False)
    try:
        if script is not None:
            settings = ConversationSettings.scripted(script, workspace, confirmation=confirm)
        else:
            from treadle.runtime.llm import ModelSettings

            chosen = ModelSettings.from_env(model=model, base_url=base_url)
            settings = ConversationSettings.litellm(
                chosen.model, workspace, chosen.base_url, confirmation=confirm
            )
    except ModelError as error:
        fail(str(error), EXIT_BAD_INPUT)
    opened = open_store_or_exit(store)
    try:
        conversation = Conversation.create(
            opened, settings, title=task[:80], callbacks=[LiveView(console)]
        )
    except TreadleError as error:
        fail(str(error), EXIT_BAD_INPUT)
    with conversation:
        conversation.send_message(task)
        status = conversation.run(max_steps)
        while status is ConversationStatus.WAITING_FOR_CONFIRMATION and _ask_user(
            console, conversation
        ):
            status = conversation.run(max_steps)
        _summary(console, conversation)
    opened.close()
    if status is ConversationStatus.ERROR:
        raise typer.Exit(1)


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
