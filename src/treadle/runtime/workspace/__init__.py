"""Workspaces: where tools act. ``LocalWorkspace`` is a folder on this machine (no isolation).

``Workspace`` is the protocol tools are typed against; path errors are ValueErrors the model sees.
"""

from treadle.runtime.workspace.base import (
    PathOutsideWorkspaceError,
    Workspace,
    WorkspaceError,
    WorkspacePathError,
)
from treadle.runtime.workspace.local import LocalWorkspace

__all__ = [
    "LocalWorkspace",
    "PathOutsideWorkspaceError",
    "Workspace",
    "WorkspaceError",
    "WorkspacePathError",
]
