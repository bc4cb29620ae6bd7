"""Which hooks a conversation object runs, from its settings, the process's policy (a server's
operator hooks) and its workspace; refused when hooks a client sent would run unsandboxed.
"""

from __future__ import annotations

from pathlib import Path

from treadle.data.hooks import HookSettings
from treadle.runtime.hooks.conversation_hooks import ConversationHooks, HookSource
from treadle.runtime.hooks.sources import (
    WORKSPACE_SETTINGS,
    HookSettingsError,
    read_hook_file,
    workspace_declares_hooks,
    workspace_hook_file,
)
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import SandboxRefused
from treadle.runtime.workspace.base import Workspace
from treadle.runtime.workspace.sandbox import SandboxedWorkspace


def build_hooks(
    settings_hooks: HookSettings | None,
    trust_workspace: bool,
    workspace: Workspace,
    secrets: Secrets,
    *,
    trusted: bool,
    operator_hooks: HookSettings | None = None,
) -> ConversationHooks:
    """The hooks of a conversation in ``workspace``: ``operator_hooks`` (a server's own),
    then the settings' (the user's on the command line, ``trusted``; a client's on a server),
    then, with ``trust_workspace``, the workspace's ``.treadle/settings.json``.
    ``SandboxRefused`` when hooks that are not ``trusted`` would run outside a sandbox."""
    sandboxed = isinstance(workspace, SandboxedWorkspace)
    client_hooks = settings_hooks is not None and not settings_hooks.empty
    if not trusted and not sandboxed and (client_hooks or trust_workspace):
        raise SandboxRefused(
            "hooks a client sends (and workspace hooks) run on this server only in a sandbox: "
            "ask for one (omit the sandbox settings to get the default: bubblewrap)"
        )
    sources = []
    if operator_hooks is not None:
        sources.append(HookSource(operator_hooks, mount_files=True))
    if settings_hooks is not None:
        sources.append(HookSource(settings_hooks, mount_files=trusted))
    ignored = None
    if trust_workspace:
        found = workspace_hook_file(workspace)
        if found is not None:
            sources.append(HookSource(read_hook_file(found), mount_files=False))
    else:
        ignored = _ignored_workspace_file(workspace)
    return ConversationHooks(sources, workspace, secrets, ignored_workspace_file=ignored)


def _ignored_workspace_file(workspace: Workspace) -> Path | None:
    """The workspace's settings file when it names hooks (not run: no trust was given); a
    file that cannot be read, or leads out of the workspace, is reported as ignored too."""
    try:
        found = workspace_hook_file(workspace)
    except HookSettingsError:
        return workspace.root / WORKSPACE_SETTINGS
    return found if found is not None and workspace_declares_hooks(found) else None
