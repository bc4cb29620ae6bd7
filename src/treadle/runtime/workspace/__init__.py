"""Workspaces: where tools act. ``LocalWorkspace`` is a folder on this machine (no isolation);
``SandboxedWorkspace`` runs the tools' processes in a bubblewrap sandbox around it.

``Workspace`` is the protocol tools are typed against; path errors are ValueErrors the model sees.
"""

from treadle.runtime.workspace.base import (
    PathOutsideWorkspaceError,
    SandboxUnavailable,
    Workspace,
    WorkspaceError,
    WorkspacePathError,
)
from treadle.runtime.workspace.local import LocalWorkspace
from treadle.runtime.workspace.sandbox import SandboxedWorkspace, check_bubblewrap
from treadle.runtime.workspace.shell import ShellCommand

__all__ = [
    "LocalWorkspace",
    "PathOutsideWorkspaceError",
    "SandboxUnavailable",
    "SandboxedWorkspace",
    "ShellCommand",
    "Workspace",
    "WorkspaceError",
    "WorkspacePathError",
    "check_bubblewrap",
]
