"""Building an agent from a conversation's settings, and the host it runs in
(``SettingsPolicy``): what the host allows the settings (``HostAllows``: a server's operator's
limits) and what it provides besides them (``HostProvides``: keys, operator hooks, MCP
servers). The settings themselves are data in ``treadle.data.settings`` (re-exported here), so
a client can send them without the runtime."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from treadle.data.hooks import HookSettings
from treadle.data.mcp import MCPServerConfig
from treadle.data.settings import SETTINGS_KEY as SETTINGS_KEY
from treadle.data.settings import CondenseMode
from treadle.data.settings import ConversationSettings as ConversationSettings
from treadle.data.settings import ModelChoice as ModelChoice
from treadle.data.settings import SandboxSettings as SandboxSettings
from treadle.errors import TreadleError
from treadle.runtime.agent import Agent
from treadle.runtime.condense.condenser import Condenser
from treadle.runtime.llm import ModelEnvironment, ModelSettings, ScriptedModel
from treadle.runtime.llm.base import LanguageModel, ModelError, close_model
from treadle.runtime.llm.choice import provider_model
from treadle.runtime.llm.litellm_model import litellm_token_counter
from treadle.runtime.llm.provider import ProviderModel
from treadle.runtime.mcp_servers import connect_mcp_servers, unavailable_prefixes
from treadle.runtime.secrets import MIN_SECRET_LENGTH, Secrets
from treadle.runtime.tools import ToolSet, builtin_tools
from treadle.runtime.workspace.local import LocalWorkspace
from treadle.runtime.workspace.sandbox import SandboxedWorkspace
from treadle.runtime.workspace.sandbox_user import SandboxUser


class SettingsError(TreadleError, ValueError):
    """Settings ask for something this process does not allow (a path outside its root)."""


class SandboxRefused(TreadleError):
    """Settings ask for less isolation than this process allows (a server's --sandbox,
    --network, --mount-ro limits): refused, never loosened silently."""


@dataclass(frozen=True)
class HostAllows:
    """What this host allows a conversation's settings to reach: the limits they are checked
    against. The default trusts them: ``treadle run`` runs the user's own settings. A server's
    settings come from its clients, so it passes ``trusted=False`` with its operator's limits."""

    trusted: bool = True
    workspace_root: Path | None = None
    """Workspaces (and, untrusted, script files) only inside this folder, by real path."""
    key_base_urls: tuple[str, ...] = ()
    """Untrusted: base URLs besides the provider's own that may receive this process's key."""
    sandbox_limit: SandboxSettings | None = None
    """The least isolation settings may ask for (a server's --sandbox, --network,
    --mount-ro); None: any. A limit, not a default: stricter settings are kept as they are."""

    def check_sandbox(self, sandbox: SandboxSettings) -> None:
        """``SandboxRefused`` when ``sandbox`` is looser than ``sandbox_limit``."""
        if self.sandbox_limit is None:
            return
        looser = sandbox.looser_than(self.sandbox_limit)
        if looser:
            raise SandboxRefused(
                f"this server does not allow {'; '.join(looser)}: ask for at least its "
                "isolation (omit the sandbox settings to get the default: bubblewrap, network "
                "off)"
            )

    def check_script(self, script: str) -> Path:
        """The script file settings name, if this process may open it (untrusted: its real
        path, inside ``workspace_root``; relative paths start there)."""
        if self.trusted:
            return Path(script)
        real = _real_inside(Path(script), self.workspace_root) if self.workspace_root else None
        if real is None:
            # Said the same whether or not the path exists: the answer tells a client nothing.
            raise SettingsError(
                "a scripted model on this server takes its responses inline "
                '({"kind": "scripted", "responses": [...]}); a script file is accepted only '
                "inside the server's --workspace-root"
            )
        return real


@dataclass(frozen=True)
class HostProvides:
    """What this host gives every conversation it opens, besides what its settings ask for:
    keys and what its environment says, operator hooks and MCP servers, where snapshots and
    sandboxes go. Never stored with a conversation. Default: nothing."""

    masked: tuple[str, ...] = field(default=(), repr=False)
    """Values masked in every conversation this process opens, never given to a tool (a
    server's client API keys: the agent's bash could still read them from a file)."""
    model_environment: ModelEnvironment = field(default=ModelEnvironment(), repr=False)
    """What the process's environment says about the model (default model, operator base
    URL, key, deadline), read by its edge (``treadle.environment``). Default: nothing."""
    snapshot_data_dir: Path | None = None
    """A local folder for the workspace snapshots of a store that has no file of its own
    (PostgreSQL); a SQLite store keeps them beside its file. None: such a store takes none."""
    sandbox_user: SandboxUser | None = None
    """Who sandboxes run as when this process is root (``serve --sandbox-user``); None: the
    workspace's owner, or uid 0 without capabilities in root's own folder (``sandbox_user``)."""
    shell_environment: Mapping[str, str] | None = field(default=None, repr=False)
    """PATH, HOME and locale for an unsandboxed shell, read by the edge; None: a bare PATH."""
    hooks: HookSettings | None = None
    """The operator's hooks (``treadle serve --hooks``), run in every conversation opened
    here, before its own."""
    mcp_servers: Mapping[str, MCPServerConfig] = field(default_factory=dict)
    """MCP servers every conversation this process runs gets (``serve --mcp-config``),
    besides its own."""
    mcp_environment: Mapping[str, str] | None = field(default=None, repr=False)
    """Where ``${VAR}`` in trusted MCP settings resolve (the process's environment, read by
    the edge); None: nothing resolves."""

    def register_masked(self, secrets: Secrets) -> Secrets:
        """``secrets`` with the ``masked`` values registered (mask only, not exported)."""
        for number, value in enumerate(self.masked, start=1):
            name = f"TREADLE_SERVER_API_KEY_{number}"
            # Shorter values cannot be masked without garbling ordinary output.
            if name not in secrets and len(value) >= MIN_SECRET_LENGTH:
                secrets.add(name, value, export=False)
        return secrets


@dataclass(frozen=True)
class SettingsPolicy:
    """The host a conversation is opened in: what it allows the settings (``allows``) and
    what it provides besides them (``provides``), handed on together from the process's edge
    (``treadle run``, ``treadle serve``, an eval worker) to the parts a conversation builds."""

    allows: HostAllows = field(default_factory=HostAllows)
    provides: HostProvides = field(default_factory=HostProvides)


def _real_inside(path: Path, root: Path) -> Path | None:
    """The real path of ``path`` (relative: from ``root``) when it lies inside ``root``."""
    try:
        real = Path(os.path.realpath(root / path))
        real_root = Path(os.path.realpath(root))
    except (OSError, ValueError):  # a NUL byte, a name too long
        return None
    return real if real == real_root or real.is_relative_to(real_root) else None


def build_model(choice: ModelChoice, policy: SettingsPolicy | None = None) -> LanguageModel:
    """The model ``choice`` names, as far as ``policy`` lets it reach."""
    policy = policy or SettingsPolicy()
    if choice.kind == "scripted":
        if choice.responses is not None:
            return ScriptedModel.from_responses(choice.responses, choice.summaries or ())
        try:
            path = policy.allows.check_script(choice.script or "")
        except SettingsError:
            # Stored settings (a conversation made by `treadle run --script`, then forked or
            # run through a server): say which file and what would let it be read.
            raise ModelError(
                f"this conversation's scripted model reads its responses from the file "
                f"{choice.script!r}, which this server may not open: a server reads script "
                "files only inside its --workspace-root (restart it with one that holds the "
                "file), or run and fork it from the command line (treadle run --conversation, "
                "treadle fork)"
            ) from None
        return ScriptedModel.from_file(path)
    # The key comes from the environment of whichever process runs the conversation (read
    # at its edge, carried by the policy); untrusted settings get it only for the base URLs
    # its operator allowed. An OpenAI-compatible base URL gets the lean client, any other
    # provider LiteLLM (``provider_model``).
    return provider_model(
        ModelSettings.resolve(
            policy.provides.model_environment,
            model=choice.model,
            base_url=choice.base_url,
            key_base_urls=None if policy.allows.trusted else policy.allows.key_base_urls,
        )
    )


def build_workspace(
    settings: ConversationSettings,
    policy: SettingsPolicy | None = None,
    sandbox: SandboxSettings | None = None,
) -> LocalWorkspace:
    """The workspace ``settings`` name, in the sandbox they ask for (``sandbox``: another one,
    the user's explicit choice for this run), checked against ``policy``. Raises
    ``SandboxUnavailable`` when the sandbox cannot start here: never a fallback to none."""
    policy = policy or SettingsPolicy()
    chosen = sandbox or settings.sandbox
    policy.allows.check_sandbox(chosen)
    if chosen.kind == "none":
        return LocalWorkspace(
            settings.workspace,
            create=True,
            within=policy.allows.workspace_root,
            environment=policy.provides.shell_environment,
        )
    return SandboxedWorkspace(
        settings.workspace,
        chosen,
        create=True,
        within=policy.allows.workspace_root,
        environment=policy.provides.shell_environment,
        user=policy.provides.sandbox_user,
    )


def build_agent(
    settings: ConversationSettings,
    model: LanguageModel | None = None,
    policy: SettingsPolicy | None = None,
    *,
    workspace: LocalWorkspace | None = None,
    secrets: Secrets | None = None,
    sandbox: SandboxSettings | None = None,
) -> Agent:
    """The agent ``settings`` describe (``model``: one given instead of the settings' own).
    With a ``workspace``, its MCP servers are connected too (their secrets registered with
    ``secrets``; stdio ones sandboxed per ``sandbox``, default the settings' own)."""
    policy = policy or SettingsPolicy()
    chosen = model or build_model(settings.model, policy)
    try:
        tools = _agent_tools(settings, policy, workspace, secrets, sandbox)
    except BaseException:
        if model is None:
            close_model(chosen)  # built here: no one else will close it
        raise
    return Agent(model=chosen, tools=tools, system_prompt=settings.system_prompt)


def _agent_tools(
    settings: ConversationSettings,
    policy: SettingsPolicy,
    workspace: LocalWorkspace | None,
    secrets: Secrets | None,
    sandbox: SandboxSettings | None,
) -> ToolSet:
    tools = builtin_tools(settings.tools)
    if workspace is None:
        return tools
    connected = connect_mcp_servers(
        settings,
        policy,
        sandbox or settings.sandbox,
        workspace.root,
        secrets if secrets is not None else Secrets(),
    )
    try:
        return ToolSet(
            [*tools.values(), *connected.tools],
            unavailable_prefixes(connected),
            connected.servers,
        )
    except BaseException:
        ToolSet(connected.tools).close()  # their processes have no other owner
        raise


def build_condenser(settings: ConversationSettings, model: LanguageModel) -> Condenser | None:
    """The condenser ``settings`` ask for (None when ``condense`` is off). The budget is
    ``context_tokens``, else 0.8 of the window LiteLLM knows for a provider's model (either
    client); tokens are counted with LiteLLM's counter for the model (its default tokenizer
    for others)."""
    if settings.condense is CondenseMode.OFF:
        return None
    if isinstance(model, ProviderModel):
        return Condenser(
            model,
            model.count_tokens,
            context_tokens=settings.context_tokens,
            window=model.context_window,
        )
    return Condenser(
        model, litellm_token_counter(model.name), context_tokens=settings.context_tokens
    )
