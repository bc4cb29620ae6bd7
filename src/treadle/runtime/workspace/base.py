"""What tools need from a workspace, whatever kind it is (local folder today, remote later).

Tools are typed against ``Workspace``; ``LocalWorkspace`` is the one implementation so far.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from treadle.errors import TreadleError


class WorkspaceError(TreadleError):
    """A workspace could not be opened (missing folder, not a directory)."""


class WorkspacePathError(TreadleError, ValueError):
    """A path a tool was given is unusable (empty, NUL byte); a ValueError, so the model is told."""


class PathOutsideWorkspaceError(WorkspacePathError):
    """A path resolves outside the workspace (absolute, ``..`` or a symlink that escapes)."""


@runtime_checkable
class Workspace(Protocol):
    """Where tools act. ``resolve`` is the one gate every file path passes through."""

    @property
    def root(self) -> Path:
        """The workspace folder (absolute, symlinks resolved); the terminal starts in it."""
        ...

    @property
    def state_dir(self) -> Path | None:
        """Where tools may keep state between processes (e.g. task lists); None: in memory."""
        ...

    def resolve(self, path: str | Path) -> Path:
        """The absolute path ``path`` names inside the workspace; refuses any path outside."""
        ...

    def display(self, path: Path) -> str:
        """How to show ``path`` to the model: relative to the root when inside it."""
        ...
