"""``treadle run`` (a real agent run with a live view) and ``treadle demo`` (a scripted one).

Both end with a summary: status, steps, tokens, cost; the demo also prints the active path,
the projection the model gets and the audit of the stored log.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from treadle.cli.ids import resolve_conversation
from treadle.cli.last_conversation import last_conversation_id
from treadle.cli.live_output import LiveOutputView
from treadle.cli.live_view import LiveView, describe
from treadle.cli.mcp_options import mcp_servers_option
from treadle.cli.model_checks import check_model, key_from_file
from treadle.cli.output import EXIT_BAD_INPUT, EXIT_VIOLATIONS, fail
from treadle.cli.root import app
from treadle.cli.store_options import StoreOption, open_existing_store, open_store_or_exit
from treadle.data.choices import CondenseMode, ConfirmationPolicy
from treadle.data.network import NetworkChoiceError, normalize_network
from treadle.data.status import ConversationStatus
from treadle.errors import TreadleError

if TYPE_CHECKING:  # the rest is imported by the function that uses it (cli/root.py)
    from treadle.data.hooks import HookSettings
    from treadle.data.mcp import MCPServerConfig
    from treadle.data.settings import ModelChoice
    from treadle.runtime.budget import Budget
    from treadle.runtime.conversation import Conversation
    from treadle.runtime.llm import ProviderModel
    from treadle.runtime.llm.base import LanguageModel
    from treadle.runtime.settings import ConversationSettings, SandboxSettings, SettingsPolicy
    from treadle.store.base import EventStore

WORKSPACE_SETTINGS_SHOWN = ".treadle/settings.json"
"""``treadle.runtime.hooks.WORKSPACE_SETTINGS`` as --help names it, without loading the hooks
(tests/cli/test_startup.py checks they are the same)."""


class SandboxKind(StrEnum):
    bubblewrap = "bubblewrap"
    none = "none"


def network_option(value: str | None) -> str | None:
    """``--network off|on|allow=HOST[:PORT],…``, normalized; a usage error naming the problem."""
    if value is None:
        return None
    try:
        return normalize_network(value)
    except NetworkChoiceError as error:
        raise typer.BadParameter(str(error)) from None


def cli_policy() -> SettingsPolicy:
    """The CLI runs the user's own settings (trusted); an unsandboxed shell gets the PATH,
    HOME and locale of the user's environment, read here at the edge."""
    from treadle.environment import shell_environment
    from treadle.runtime.settings import HostProvides, SettingsPolicy

    return SettingsPolicy(
        provides=HostProvides(
            shell_environment=shell_environment(), mcp_environment=dict(os.environ)
        )
    )


EXIT_STOPPED = 3
"""Exit 3: stopped before the end (interrupted, paused, max steps, a confirmation nobody gave)."""
STOPPED_REASONS = ("stopped after", "every call answered")
"""How an idle status's reason starts when the run stopped short of the agent's answer."""


def model_key_from_env() -> str | None:
    """This process's model key (``TREADLE_API_KEY``), read here at the edge: the runtime
    masks what it is given and never reads the environment itself."""
    from treadle.environment import model_environment

    return model_environment().api_key


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
    from rich.panel import Panel

    from treadle.cli.terminal_text import visible
    from treadle.cli.transcript import answer_renderable, final_answer
    from treadle.events.model import ActionEvent, MessageEvent

    path = conversation.active_path()
    steps = sum(1 for e in path if e.kind == "action" and e.usage is not None) + sum(
        1 for e in path if e.kind == "message" and e.source == "agent"
    )
    usages = [
        e.usage for e in path if isinstance(e, ActionEvent | MessageEvent) and e.usage is not None
    ]
    tokens_in = sum(u.prompt_tokens for u in usages)
    tokens_out = sum(u.completion_tokens for u in usages)
    cost = sum(u.cost_usd for u in usages)
    said = conversation.status_reason
    reason = f" ({escape(visible(said))})" if said else ""  # anyone's text: never markup
    console.print(
        Panel.fit(
            f"status: [bold]{conversation.status.value}[/]{reason}\n"
            f"model steps: {steps}   events on the active path: {len(path)}\n"
            f"tokens: {tokens_in} in / {tokens_out} out   cost: ${cost:.4f}\n"
            f"isolation: {escape(_isolation_line(conversation))}\n"
            f"conversation: {conversation.id}",
            title="summary",
        )
    )
    answer = final_answer(path)
    if answer is not None:  # whole, as Markdown: the one thing the user ran it for
        console.rule("final answer", align="left")
        console.print(answer_renderable(answer))


def _isolation_line(conversation: Conversation) -> str:
    from treadle.data.isolation import isolation_text

    fact = dict(conversation.workspace.isolation)
    fact["override"] = conversation.isolation_override
    return isolation_text(fact)


def _ask_user(console: Console, conversation: Conversation) -> ConversationStatus | None:
    """Confirm or reject each pending call at the terminal; the status the answers left
    (None: no terminal, nobody can answer here)."""
    if not sys.stdin.isatty():
        console.print(
            "[yellow]waiting for confirmation[/]; no terminal to ask: answer with "
            f"treadle confirm {conversation.id} (or treadle reject), a client or the server"
        )
        return None
    status = conversation.status
    for action in conversation.pending_actions():
        answer = typer.prompt(f"run {describe(action)}? [y/n]", default="y")
        if answer.strip().lower().startswith("y"):
            status = conversation.confirm([action.id])
        else:
            status = conversation.reject([action.id], reason="rejected at the terminal")
        if status is not ConversationStatus.WAITING_FOR_CONFIRMATION:
            break  # the calls ended the turn (finish), failed, or were paused
    return status


@app.command()
def run(
    task: Annotated[
        str | None,
        typer.Argument(
            help="What the agent should do; with --conversation, the next message (optional)",
            show_default=False,
        ),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="Folder the tools act in (the only one a sandboxed command can change) "
            "[default: the current folder]; with --conversation only when it has no stored "
            "settings",
        ),
    ] = None,
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
        typer.Option("--confirm", help="Which calls wait for you [default: never]"),
    ] = None,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1)] = 50,
    condense: Annotated[
        CondenseMode | None,
        typer.Option(
            "--condense",
            help="auto: condense the model's context near its token budget or when the "
            "provider refuses it as too long; off: always send the whole history "
            "[default: auto]",
        ),
    ] = None,
    context_tokens: Annotated[
        int | None,
        typer.Option(
            "--context-tokens",
            min=256,
            help="Token budget of one request (default: 0.8 of the model's input window "
            "when LiteLLM knows the model; else condense only when the provider refuses)",
        ),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            min=0.000001,
            help="Budget in USD for all the conversation's model calls: reaching it pauses "
            "the run (exit 3); with --conversation it may raise the stored one",
        ),
    ] = None,
    max_total_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-total-tokens",
            min=1,
            help="Budget of tokens (in and out) for all the conversation's model calls: "
            "reaching it pauses the run (exit 3); with --conversation it may raise the "
            "stored one",
        ),
    ] = None,
    model_deadline: Annotated[
        float | None,
        typer.Option(
            "--model-deadline",
            min=0.001,
            help="Seconds one model call may take, retries included "
            "(or TREADLE_MODEL_DEADLINE; default 600)",
        ),
    ] = None,
    conversation_id: Annotated[
        str | None,
        typer.Option(
            "--conversation",
            help="Continue this stored conversation with its stored settings (--workspace "
            "only for one without, e.g. imported: then stored with it); --model, --base-url "
            "or --script switch it to that model from now on, recorded in its log",
        ),
    ] = None,
    continue_last: Annotated[
        bool,
        typer.Option(
            "-c",
            "--continue",
            help="Continue the last conversation of the workspace (the most recently updated "
            "one whose workspace is --workspace, default the current folder), as --conversation",
        ),
    ] = False,
    sandbox: Annotated[
        SandboxKind | None,
        typer.Option(
            "--sandbox",
            help="Where the tools' processes run: bubblewrap (a sandbox: only the workspace "
            "is writable) or none (as you, on the whole machine) [default: bubblewrap]; with "
            "--conversation, an explicit choice for this run, recorded in its log",
        ),
    ] = None,
    network: Annotated[
        str | None,
        typer.Option(
            "--network",
            help="Network inside the sandbox [default: off]: off, on (the host's network, "
            "services on 127.0.0.1 included) or allow=HOST[:PORT],... (only those hosts, "
            "through a proxy; HOST a name, *.name or IP; port 443 and 80 by default; "
            "loopback only with a port)",
            metavar="off|on|allow=HOST[:PORT],...",
            callback=network_option,
        ),
    ] = None,
    mount_ro: Annotated[
        list[Path] | None,
        typer.Option(
            "--mount-ro",
            help="A host path shown read-only inside the sandbox (repeatable), e.g. a toolchain",
        ),
    ] = None,
    hooks: Annotated[
        Path | None,
        typer.Option(
            "--hooks",
            help="Hooks in Claude Code's settings shape (its settings.json, or its hooks "
            "object), stored with the conversation; see docs/hooks.md",
        ),
    ] = None,
    trust_workspace_hooks: Annotated[
        bool,
        typer.Option(
            "--trust-workspace-hooks",
            help=f"Also run the hooks of the workspace's {WORKSPACE_SETTINGS_SHOWN}, which the agent "
            "itself can write (ignored without this)",
        ),
    ] = False,
    mcp_config: Annotated[
        Path | None,
        typer.Option(
            "--mcp-config",
            help='MCP servers for the agent, from a {"mcpServers": ...} JSON file (docs/mcp.md); '
            "stored with the conversation (secrets as ${VAR}, resolved from the environment)",
        ),
    ] = None,
    store: StoreOption = None,
    create_workspace: Annotated[
        bool,
        typer.Option(
            "--create-workspace", help="Create the --workspace folder when it does not exist"
        ),
    ] = False,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file",
            help="File holding the model's API key (else TREADLE_API_KEY); kept out of argv",
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "-q", "--quiet", help="Leave the state changes (status, facts) out of the live view"
        ),
    ] = False,
) -> None:
    """Run an agent on TASK in a workspace, or continue a stored conversation, showing every
    event as it is stored. The tools run in a bubblewrap sandbox unless --sandbox none.

    Ctrl-C or SIGTERM stops the run cleanly: open calls are closed, the stop is recorded and
    the summary printed (exit 3)."""
    from treadle.runtime.budget import Budget
    from treadle.runtime.conversation import Conversation

    console = Console(highlight=False)
    _quiet_logs()
    key_from_file(api_key_file)
    choice = _ModelOptions(
        model,
        base_url,
        script,
        confirm,
        model_deadline,
        condense,
        context_tokens,
        Budget(max_cost, max_total_tokens),
        _hook_settings(hooks),
        trust_workspace_hooks,
        mcp_servers_option(mcp_config),
    )
    sandbox_choice = _SandboxOptions(sandbox, network, tuple(mount_ro or ()))
    if continue_last and conversation_id is not None:
        fail("give -c/--continue or --conversation ID, not both", EXIT_BAD_INPUT)
    if conversation_id is None and not continue_last:
        if task is None:
            fail(
                "give a TASK for a new run (in --workspace DIR, default the current folder), "
                "or --conversation ID to continue a stored one",
                EXIT_BAD_INPUT,
            )
        workspace = _workspace_folder(workspace, create_workspace)
        settings, chosen_model = _new_settings(console, workspace, choice, sandbox_choice)
        opened = open_store_or_exit(store)
        try:
            conversation = Conversation.create(
                opened,
                settings,
                title=task[:80],
                model=chosen_model,
                callbacks=[LiveView(console)],
                model_key=model_key_from_env(),
                policy=cli_policy(),
            )
        except TreadleError as error:
            opened.close()
            fail(str(error), EXIT_BAD_INPUT)
        to_store: ConversationSettings | None = None
        new_model: ModelChoice | None = None
        budget = Budget()
    else:
        opened = open_existing_store(store)
        if conversation_id is None:  # -c: the workspace's last one
            conversation_id = last_conversation_id(opened, workspace)
        else:
            conversation_id = resolve_conversation(opened, conversation_id)  # or a prefix
        conversation, to_store, new_model = _continue(
            console, opened, conversation_id, workspace, choice, sandbox_choice
        )
        budget = choice.budget
        if task is None and conversation.status is ConversationStatus.FINISHED:
            conversation.close()
            opened.close()
            fail(
                f"conversation {conversation_id} is finished: give a MESSAGE to continue it",
                EXIT_BAD_INPUT,
            )
    conversation.output_listeners.append(LiveOutputView(console))
    if quiet:  # the status line of each step and the run's facts: most of a live view's lines
        for callback in conversation.callbacks:
            if isinstance(callback, LiveView):
                callback.show_state = False
    try:
        status = _run_under_lease(
            console, opened, conversation, task, max_steps, to_store, budget, new_model
        )
    finally:
        opened.close()
    raise typer.Exit(_exit_code(status, conversation.status_reason))


def _run_under_lease(
    console: Console,
    opened: EventStore,
    conversation: Conversation,
    task: str | None,
    max_steps: int,
    to_store: ConversationSettings | None,
    budget: Budget,
    new_model: ModelChoice | None = None,
) -> ConversationStatus:
    """The run, holding the conversation's run lease; ``to_store``: settings stored first,
    ``budget``: budgets raised first, ``new_model``: the model changed first, all under the
    lease. Refused (exit 2, naming the
    holder) while another process runs it."""
    from treadle.runtime.llm import close_model

    try:
        return _run_holding_lease(
            console, opened, conversation, task, max_steps, to_store, budget, new_model
        )
    finally:
        # The model this command built and gave the conversation is this command's to close
        # (one its parts built they closed already: closing twice is harmless).
        close_model(conversation.agent.model)


def _run_holding_lease(
    console: Console,
    opened: EventStore,
    conversation: Conversation,
    task: str | None,
    max_steps: int,
    to_store: ConversationSettings | None,
    budget: Budget,
    new_model: ModelChoice | None,
) -> ConversationStatus:
    from treadle.runtime.continuing import store_missing_settings
    from treadle.runtime.hooks import PromptBlocked
    from treadle.store.lease_holder import HeldLease, LeaseTaken
    from treadle.store.leases import CLI, new_owner, open_leases

    with conversation:
        ignored = conversation.hooks.ignored_workspace_file
        if ignored is not None:
            console.print(
                f"[yellow]hooks ignored[/]: {escape(str(ignored))} names hooks, which run only "
                "with --trust-workspace-hooks (the agent can write that file)"
            )
        try:
            # Like a server, a CLI run holds the run lease: if this process dies, the lease
            # expires and every reader sees the run as interrupted (no server takes it over).
            lease = HeldLease(
                open_leases(opened.url),
                conversation.id,
                new_owner(CLI),
                on_lost=conversation.pause,
            )
        except TreadleError as error:
            fail(str(error), EXIT_BAD_INPUT)
        try:
            with lease, _signals_stop_the_run():
                if to_store is not None:
                    store_missing_settings(opened, conversation.id, to_store)
                elif budget.limited:
                    _raise_budget(console, conversation, budget)
                if new_model is not None:
                    conversation.change_model(new_model)  # the live view shows the fact
                status = _run_to_the_end(console, conversation, task, max_steps)
        except LeaseTaken as error:
            fail(f"{error}: wait for that run to end, or stop it there", EXIT_BAD_INPUT)
        except KeyboardInterrupt as stop:
            console.print(f"[yellow]stopped by {str(stop) or 'an interrupt'}[/]")
            status = ConversationStatus.PAUSED  # what was recorded, or would have been
        except PromptBlocked as blocked:  # nothing stored: the task never reached the model
            fail(str(blocked), EXIT_BAD_INPUT)
        except TreadleError as error:  # the store failed and could not record it
            fail(f"the run of conversation {conversation.id} stopped: {error}", 1)
        finally:
            lease.leases.close()
        _summary(console, conversation)
    return status


def _workspace_folder(workspace: Path | None, create: bool) -> Path:
    """The new run's workspace: ``--workspace`` or the current folder; one that does not exist
    is refused (a typo would silently make an empty one) unless ``--create-workspace``."""
    folder = Path.cwd() if workspace is None else workspace
    if folder.exists() and not folder.is_dir():
        fail(f"--workspace {folder} is not a folder", EXIT_BAD_INPUT)
    if not folder.exists():
        if not create:
            fail(
                f"--workspace {folder} does not exist: check the path, or give "
                "--create-workspace to make it",
                EXIT_BAD_INPUT,
            )
        try:
            folder.mkdir(parents=True)
        except OSError as error:
            fail(f"cannot create --workspace {folder}: {error.strerror or error}", EXIT_BAD_INPUT)
    return folder


def _unlimited() -> Budget:
    from treadle.runtime.budget import Budget

    return Budget()


@dataclass(frozen=True)
class _ModelOptions:
    """The options that choose a conversation's settings."""

    model: str | None
    base_url: str | None
    script: Path | None
    confirm: ConfirmationPolicy | None
    deadline_s: float | None
    condense: CondenseMode | None = None
    context_tokens: int | None = None
    budget: Budget = field(default_factory=lambda: _unlimited())
    hooks: HookSettings | None = None
    trust_workspace_hooks: bool = False
    mcp_servers: dict[str, MCPServerConfig] = field(default_factory=dict)

    def hook_fields(self) -> dict[str, object]:
        """The hook settings of a new conversation (none given: none stored)."""
        fields: dict[str, object] = {}
        if self.hooks is not None:
            fields["hooks"] = self.hooks
        if self.trust_workspace_hooks:
            fields["trust_workspace_hooks"] = True
        return fields

    def condense_fields(self) -> dict[str, object]:
        """The condensation, budget and MCP settings of a new conversation."""
        fields: dict[str, object] = {"condense": self.condense or CondenseMode.AUTO}
        if self.mcp_servers:
            fields["mcp_servers"] = self.mcp_servers
        if self.context_tokens is not None:
            fields["context_tokens"] = self.context_tokens
        if self.budget.max_cost_usd is not None:
            fields["max_cost_usd"] = self.budget.max_cost_usd
        if self.budget.max_total_tokens is not None:
            fields["max_total_tokens"] = self.budget.max_total_tokens
        return fields


@dataclass(frozen=True)
class _SandboxOptions:
    """The options that choose where the tools run (None: not given)."""

    kind: SandboxKind | None
    network: str | None
    mounts_ro: tuple[Path, ...]

    @property
    def given(self) -> bool:
        return self.kind is not None or self.network is not None or bool(self.mounts_ro)

    def settings(self, base: SandboxSettings | None = None) -> SandboxSettings:
        """``base`` (default: the default sandbox) with the options given; exit 2 when they
        do not fit together (e.g. --mount-ro with --sandbox none)."""
        from pydantic import ValidationError

        from treadle.runtime.settings import SandboxSettings

        fields = (base or SandboxSettings()).model_dump()
        if self.kind is not None:
            fields["kind"] = self.kind.value
        if self.network is not None:
            fields["network"] = self.network
        if self.mounts_ro:
            fields["mounts_ro"] = [str(path.resolve()) for path in self.mounts_ro]
        if fields["kind"] == "none":
            fields["mounts_ro"] = [] if not self.mounts_ro else fields["mounts_ro"]
        try:
            return SandboxSettings.model_validate(fields)
        except ValidationError as error:
            message = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
            fail(f"--sandbox/--network/--mount-ro: {message}", EXIT_BAD_INPUT)


def _new_settings(
    console: Console, workspace: Path, choice: _ModelOptions, sandbox: _SandboxOptions
) -> tuple[ConversationSettings, LanguageModel | None]:
    """Settings from the options, and the model to run them with (None: built from them)."""
    from treadle.runtime.llm import ModelError
    from treadle.runtime.settings import ConversationSettings

    confirmation = choice.confirm or ConfirmationPolicy.NEVER
    isolation = sandbox.settings()
    try:
        if choice.script is not None:
            settings = ConversationSettings.scripted(
                choice.script,
                workspace,
                confirmation=confirmation,
                sandbox=isolation,
                **choice.condense_fields(),
                **choice.hook_fields(),
            )
            return settings, None
        chosen = _provider_model(console, choice.model, choice.base_url, choice.deadline_s)
        settings = ConversationSettings.litellm(
            chosen.settings.model,
            workspace,
            chosen.settings.base_url,
            confirmation=confirmation,
            sandbox=isolation,
            **choice.condense_fields(),
            **choice.hook_fields(),
        )
        return settings, chosen
    except ModelError as error:
        fail(str(error), EXIT_BAD_INPUT)


def _provider_model(
    console: Console, model: str | None, base_url: str | None, deadline_s: float | None
) -> ProviderModel:
    """The provider's client for the options (``provider_model``: the OpenAI-compatible one for
    ``openai/NAME`` with a base URL, else LiteLLM), its retries shown; the conversation it is
    given to does not close it: ``_run_under_lease`` does."""
    from treadle.environment import model_environment
    from treadle.runtime.llm import ModelSettings, provider_model

    # The edge: TREADLE_MODEL, TREADLE_BASE_URL, TREADLE_API_KEY and TREADLE_MODEL_DEADLINE
    # are read here and given to the runtime; the options come first.
    chosen = ModelSettings.resolve(
        model_environment(), model=model, base_url=base_url, deadline_s=deadline_s
    )
    # Before anything is created or paid for: a misspelt model, a missing key.
    check_model(chosen.model, chosen.base_url, chosen.api_key)
    return provider_model(
        chosen, on_retry=lambda notice: console.print(f"[yellow]retry[/] {notice}")
    )


def _continue(
    console: Console,
    store: EventStore,
    conversation_id: str,
    workspace: Path | None,
    choice: _ModelOptions,
    sandbox: _SandboxOptions,
) -> tuple[Conversation, ConversationSettings | None, ModelChoice | None]:
    """The stored conversation to continue, the settings to store with it (None when it has
    its own) and the model it changes to (None: it keeps its own). Exits 2 when it is unknown,
    or the options do not fit it. Sandbox options on a conversation with settings are the
    user's explicit choice for this run (recorded with its isolation); the stored settings
    keep their own."""
    from pydantic import ValidationError

    from treadle.runtime.conversation import Conversation
    from treadle.runtime.settings import ConversationSettings
    from treadle.store.base import ConversationNotFound, StoreError

    try:
        info = store.get_conversation(conversation_id)
        stored = ConversationSettings.from_metadata(info.metadata)
    except ConversationNotFound:
        store.close()
        fail(f"no conversation {conversation_id!r} in store {store.url}", EXIT_BAD_INPUT)
    except ValidationError as error:
        store.close()
        fail(
            f"the stored settings of conversation {conversation_id} cannot be read: "
            f"{error.errors()[0]['msg']}",
            EXIT_BAD_INPUT,
        )
    except StoreError as error:
        store.close()
        fail(str(error), EXIT_BAD_INPUT)
    to_store: ConversationSettings | None = None
    chosen_model: LanguageModel | None = None
    new_model: ModelChoice | None = None
    try:
        if stored is None:
            if workspace is None or (choice.script is None and choice.model is None):
                store.close()
                fail(
                    f"conversation {conversation_id} has no stored settings (was it imported?):"
                    " give --workspace DIR and --model NAME or --script FILE to run it; they "
                    "are stored with it",
                    EXIT_BAD_INPUT,
                )
            to_store, chosen_model = _new_settings(console, workspace, choice, sandbox)
            # Stored with it under the run lease (``_run_under_lease``), not here.
            conversation = Conversation.open(
                store,
                conversation_id,
                model=chosen_model,
                callbacks=[LiveView(console)],
                model_key=model_key_from_env(),
                settings_if_missing=to_store,
                policy=cli_policy(),
            )
        else:
            _check_fits(conversation_id, stored, workspace, choice)
            new_model, chosen_model = _model_change(console, stored, choice)
            if new_model is None and stored.model.kind == "litellm":  # retries shown, deadline
                chosen_model = _provider_model(
                    console, stored.model.model, stored.model.base_url, choice.deadline_s
                )
            conversation = Conversation.open(
                store,
                conversation_id,
                model=chosen_model,
                callbacks=[LiveView(console)],
                model_key=model_key_from_env(),
                policy=cli_policy(),
                sandbox=sandbox.settings(stored.sandbox) if sandbox.given else None,
            )
    except TreadleError as error:
        store.close()
        fail(str(error), EXIT_BAD_INPUT)
    return conversation, to_store, new_model


def _model_change(
    console: Console, stored: ConversationSettings, choice: _ModelOptions
) -> tuple[ModelChoice | None, LanguageModel | None]:
    """The model ``--script``/``--model``/``--base-url`` switch a stored conversation to, and
    that model, built and checked before anything is stored (None, None: none given, or the
    stored one). ``--base-url`` alone keeps the stored model's name; ``--model`` alone takes
    the base URL from ``TREADLE_BASE_URL``, not the stored one (another provider)."""
    from treadle.data.settings import ModelChoice
    from treadle.runtime.settings import build_model

    if choice.script is not None:
        wanted = ModelChoice(kind="scripted", script=str(choice.script.resolve()))
        if wanted == stored.model:
            return None, None
        return wanted, build_model(wanted, cli_policy())
    if choice.model is None and choice.base_url is None:
        return None, None
    name = choice.model
    if name is None and stored.model.kind == "litellm":
        name = stored.model.model
    chosen = _provider_model(console, name, choice.base_url, choice.deadline_s)
    wanted = ModelChoice(
        kind="litellm", model=chosen.settings.model, base_url=chosen.settings.base_url
    )
    return (None, chosen) if wanted == stored.model else (wanted, chosen)


def _check_fits(
    conversation_id: str,
    stored: ConversationSettings,
    workspace: Path | None,
    choice: _ModelOptions,
) -> None:
    """Exit 2 when an option asks for other settings than the stored ones: a conversation
    keeps its settings (its log was made with them), but for its model (``_model_change``)
    and budgets, which may be raised."""
    from treadle.runtime.budget import BudgetLowered, raised

    differs: list[str] = []
    if workspace is not None and str(workspace.resolve()) != stored.workspace:
        differs.append(f"--workspace (stored: {stored.workspace})")
    if choice.confirm is not None and choice.confirm != stored.confirmation:
        differs.append(f"--confirm (stored: {stored.confirmation.value})")
    if choice.condense is not None and choice.condense != stored.condense:
        differs.append(f"--condense (stored: {stored.condense.value})")
    if choice.context_tokens is not None and choice.context_tokens != stored.context_tokens:
        differs.append(f"--context-tokens (stored: {stored.context_tokens or 'none'})")
    if choice.hooks is not None and choice.hooks != stored.hooks:
        differs.append("--hooks (the stored hooks differ)")
    if choice.trust_workspace_hooks and not stored.trust_workspace_hooks:
        differs.append("--trust-workspace-hooks (stored: not trusted)")
    if choice.mcp_servers and choice.mcp_servers != stored.mcp_servers:
        differs.append(f"--mcp-config (stored servers: {', '.join(stored.mcp_servers) or 'none'})")
    try:  # a budget is the one setting that may change, and only upwards
        raised(stored, choice.budget)
    except BudgetLowered as error:
        differs.append(f"{error} (a budget may only be raised)")
    if differs:
        fail(
            f"conversation {conversation_id} has stored settings and keeps them: "
            f"{'; '.join(differs)}; leave these options out to continue it",
            EXIT_BAD_INPUT,
        )


def _raise_budget(console: Console, conversation: Conversation, budget: Budget) -> None:
    """Raise the stored budgets to ``budget``'s (checked by ``_check_fits``), recorded in the
    log; said on screen."""
    for name, change in conversation.raise_budget(budget).items():
        console.print(f"[cyan]budget[/] {name} raised from {change['from']} to {change['to']}")


def _hook_settings(path: Path | None) -> HookSettings | None:
    """The hooks of ``--hooks FILE``; exit 2 naming what is wrong with the file."""
    from treadle.runtime.hooks import read_hook_file

    if path is None:
        return None
    try:
        return read_hook_file(path)
    except TreadleError as error:
        fail(f"--hooks: {error}", EXIT_BAD_INPUT)


def _quiet_logs() -> None:
    """What the run says goes to the screen through the live view, the retry notices and the
    summary; log records (meant for servers) would only repeat it, with tracebacks."""
    logging.getLogger("treadle").addHandler(logging.NullHandler())
    logging.getLogger("treadle").propagate = False


def _run_to_the_end(
    console: Console, conversation: Conversation, task: str | None, max_steps: int
) -> ConversationStatus:
    """Run up to ``max_steps`` model calls in all, confirmations between them: an answer
    that ends the turn (a confirmed ``finish``) ends the run; only "every call answered"
    (idle) asks the model again. Messages queued meanwhile (``POST /messages`` while this
    runs) are stored before the end, as a server's run does."""
    conversation.deliver_queued_messages()  # older than the task: stored first
    if task is not None:
        conversation.send_message(task)
    start = conversation.model_responses()
    status = conversation.run(max_steps)
    while status is ConversationStatus.WAITING_FOR_CONFIRMATION:
        answered = _ask_user(console, conversation)
        if answered is None:
            break
        status = answered
        left = max_steps - (conversation.model_responses() - start)
        if status is ConversationStatus.IDLE and left > 0:
            status = conversation.run(left)
    conversation.deliver_queued_messages()  # those sent after its last safe point
    return conversation.status


def _exit_code(status: ConversationStatus, reason: str | None) -> int:
    """Exit codes: 0 finished (or idle), 1 ERROR or STUCK, 3 stopped before the end."""
    if status in (ConversationStatus.ERROR, ConversationStatus.STUCK):
        return 1
    if status in (ConversationStatus.PAUSED, ConversationStatus.WAITING_FOR_CONFIRMATION):
        return EXIT_STOPPED
    if status is ConversationStatus.IDLE and (reason or "").startswith(STOPPED_REASONS):
        return EXIT_STOPPED  # max steps reached (before the model was asked again)
    return 0


@app.command()
def demo(store: StoreOption = None) -> None:
    """A scripted run with real tools in a temporary workspace: parallel calls whose results
    complete out of order, an invalid call answered by an agent error, confirmations; then the
    active path, the projection and the audit."""
    from treadle.runtime.conversation import Conversation
    from treadle.runtime.settings import ConversationSettings

    console = Console(highlight=False)
    workspace = Path(tempfile.mkdtemp(prefix="treadle-demo-"))
    script = resources.files("treadle.demo").joinpath("script.json")
    settings = ConversationSettings.scripted(
        str(script), workspace, confirmation=ConfirmationPolicy.RISKY
    )
    opened = open_store_or_exit(store)
    console.rule("Treadle demo")
    console.print(f"store: {opened.url}\nworkspace: {workspace}")
    try:
        conversation = Conversation.create(
            opened,
            settings,
            title="treadle demo",
            callbacks=[LiveView(console)],
            model_key=model_key_from_env(),
            policy=cli_policy(),
        )
    except TreadleError as error:  # e.g. the sandbox cannot start here: say why, exit 2
        opened.close()
        fail(str(error), EXIT_BAD_INPUT)
    console.print(f"isolation: {escape(_isolation_line(conversation))}")
    with conversation:
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
    from treadle.events.audit import audit_events
    from treadle.events.projection import count_tool_calls

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
