"""What a conversation is built from: its agent (model and tools), workspace, secrets,
confirmation, condenser, snapshots, hooks, skills and the caller's own run extensions, as one
typed value
(``ConversationParts``), and the one builder that makes them from stored settings
(``build_parts``).

``Conversation.create`` and ``open`` build the parts from the settings unless they are given
them: replay and evals compose their own (a recorded model, recorded tools and hooks) from the
built ones with ``replace``. Whoever builds parts closes them (``close``): a conversation closes
only the parts it built itself, never those it was given or shares (a fork). The same holds for
the model: the parts close the model they built from the settings (its connection pool), never
one they were given (its giver closes it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from treadle.runtime.agent import Agent
from treadle.runtime.condense.condenser import Condenser
from treadle.runtime.confirmation import ConfirmationPolicy, RiskAnalyzer
from treadle.runtime.extensions.base import RunExtension
from treadle.runtime.hooks import ConversationHooks, build_hooks
from treadle.runtime.live_output import LiveOutput
from treadle.runtime.llm.base import LanguageModel, close_model
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import (
    ConversationSettings,
    SandboxSettings,
    SettingsPolicy,
    build_agent,
    build_condenser,
    build_workspace,
)
from treadle.runtime.skills import WorkspaceSkills
from treadle.runtime.snapshots import WorkspaceSnapshots, open_snapshot_store
from treadle.runtime.workspace.base import Workspace
from treadle.store.base import EventStore

MODEL_KEY_NAME = "TREADLE_API_KEY"
"""The name the process's model key is masked under (``<secret:TREADLE_API_KEY>``)."""


@dataclass(frozen=True)
class ConversationParts:
    """The parts a ``Conversation`` drives; each None or default means "none" (no condenser,
    no snapshots, no hooks, the policy's defaults), except ``skills``: None loads the
    workspace's own."""

    agent: Agent
    workspace: Workspace
    secrets: Secrets = field(default_factory=Secrets)
    confirmation: ConfirmationPolicy = ConfirmationPolicy.NEVER
    risk_analyzer: RiskAnalyzer | None = None
    condenser: Condenser | None = None
    snapshots: WorkspaceSnapshots | None = None
    """The workspace's snapshots (None: off in the settings, or no place for them)."""
    policy: SettingsPolicy = field(default_factory=SettingsPolicy)
    isolation_override: str | None = None
    """Why the tools run under other isolation than the stored settings' (the user's explicit
    choice, recorded with each run's isolation), or None."""
    hooks: ConversationHooks | None = None
    skills: WorkspaceSkills | None = None
    live_output: LiveOutput = field(default_factory=LiveOutput)
    """Who is told a running call's output as it comes (the CLI's live view, the server's
    stream); never stored. Not a loop point: its chunks come from inside a call."""
    extensions: tuple[RunExtension, ...] = ()
    """Capabilities of the caller's own, called at each point of the loop after the built-in
    ones, in this order (``RunExtension``; docs/architecture.md, the loop's points)."""
    built_model: LanguageModel | None = None
    """The model these parts built from the settings, closed with them (its connection pool);
    None when the model was given: whoever gave it closes it."""

    def replace(self, **changes: Any) -> ConversationParts:
        """These parts with ``changes`` (e.g. ``agent=``, ``hooks=``): the others shared."""
        return dataclasses.replace(self, **changes)

    def close(self) -> None:
        """Release what the parts hold: the tools' processes (terminal sessions, MCP
        connections) and the model's connections when they built it. For whoever built them."""
        try:
            self.agent.tools.close()
        finally:
            close_model(self.built_model)


def build_parts(
    store: EventStore,
    settings: ConversationSettings,
    *,
    model: LanguageModel | None = None,
    secrets: Secrets | None = None,
    policy: SettingsPolicy | None = None,
    model_key: str | None = None,
    sandbox: SandboxSettings | None = None,
) -> ConversationParts:
    """The parts ``settings`` ask for, checked against ``policy`` (what the host allows):
    ``model`` instead of the settings' one, ``secrets`` masked and given to tools,
    ``model_key`` (this process's model key) masked and never given to a tool, ``sandbox``
    instead of the settings' one (the user's explicit choice, recorded as an override)."""
    policy = policy or SettingsPolicy()
    secrets = policy.provides.register_masked(secrets if secrets is not None else Secrets())
    if model_key and MODEL_KEY_NAME not in secrets:
        # Masked wherever it shows up (a provider's error text), never given to a tool.
        secrets.add(MODEL_KEY_NAME, model_key, export=False)
    workspace = build_workspace(settings, policy, sandbox)
    # MCP servers start with the agent: in the workspace, their secrets masked.
    agent = build_agent(
        settings, model, policy, workspace=workspace, secrets=secrets, sandbox=sandbox
    )
    try:
        snapshots = _workspace_snapshots(store, settings, workspace, policy)
        hooks = build_hooks(
            settings.hooks,
            settings.trust_workspace_hooks,
            workspace,
            secrets,
            trusted=policy.allows.trusted,
            operator_hooks=policy.provides.hooks,
        )
    except BaseException:
        try:
            agent.tools.close()
        finally:
            if model is None:
                close_model(agent.model)
        raise
    override = None
    if sandbox is not None and sandbox != settings.sandbox:
        stored = settings.sandbox
        override = (
            f"chosen for this run by the user; the conversation's settings ask for sandbox "
            f"{stored.kind}, network {stored.network}"
        )
    return ConversationParts(
        agent=agent,
        workspace=workspace,
        secrets=secrets,
        confirmation=settings.confirmation,
        condenser=build_condenser(settings, agent.model),
        snapshots=snapshots,
        policy=policy,
        isolation_override=override,
        hooks=hooks,
        built_model=None if model is not None else agent.model,
    )


def _workspace_snapshots(
    store: EventStore, settings: ConversationSettings, workspace: Workspace, policy: SettingsPolicy
) -> WorkspaceSnapshots | None:
    """The snapshots ``settings`` ask for, when the store has a place for them."""
    if not settings.snapshots.enabled:
        return None
    objects = open_snapshot_store(store, policy.provides.snapshot_data_dir)
    if objects is None:
        return None
    return WorkspaceSnapshots(objects, workspace.root, settings.snapshots, store.url)


__all__ = ["MODEL_KEY_NAME", "ConversationParts", "build_parts"]
