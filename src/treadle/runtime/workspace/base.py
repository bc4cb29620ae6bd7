"""What tools need from a workspace, whatever kind it is (a local folder, a sandbox).

Tools are typed against ``Workspace``: ``LocalWorkspace`` (no isolation) and
``SandboxedWorkspace`` (bubblewrap) implement it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from treadle.errors import TreadleError
from treadle.runtime.workspace.shell import ShellCommand


class WorkspaceError(TreadleError):
    """A workspace could not be opened (missing folder, not a directory)."""


class SandboxUnavailable(WorkspaceError):
    """The sandbox a conversation asks for cannot start here (not installed, not permitted)."""


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

    @property
    def isolation(self) -> dict[str, Any]:
        """What the tools' processes run under (the log's ``isolation`` fact): sandbox,
        network, mounts_ro, limits (None: unlimited)."""
        ...

    def shell_command(self, shell_argv: list[str], private_dir: Path) -> ShellCommand:
        """How to start ``shell_argv`` in this workspace; ``private_dir`` is the terminal's
        folder (its command file), shown read-only inside a sandbox."""
        ...

    def resolve(self, path: str | Path) -> Path:
        """The absolute path ``path`` names inside the workspace; refuses any path outside."""
        ...

    def display(self, path: Path) -> str:
        """How to show ``path`` to the model: relative to the root when inside it."""
        ...
