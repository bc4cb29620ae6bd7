"""Hooks (docs/hooks.md): commands the user configures in Claude Code's settings shape, run at
points of the run loop, that can block a call or a prompt, add context, or keep the agent going.
"""

from treadle.runtime.hooks.build import build_hooks
from treadle.runtime.hooks.conversation_hooks import (
    HOOK_KEY,
    MAX_STOP_CONTINUATIONS,
    ConversationHooks,
    HookSource,
    PromptBlocked,
    Screened,
)
from treadle.runtime.hooks.sources import WORKSPACE_SETTINGS, HookSettingsError, read_hook_file

__all__ = [
    "HOOK_KEY",
    "MAX_STOP_CONTINUATIONS",
    "WORKSPACE_SETTINGS",
    "ConversationHooks",
    "HookSettingsError",
    "HookSource",
    "PromptBlocked",
    "Screened",
    "build_hooks",
    "read_hook_file",
]
