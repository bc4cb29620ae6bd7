"""A local folder as the workspace: file tools act inside it and the terminal starts in it.

A local workspace is NO isolation. ``resolve`` keeps the file editor inside the folder, but the
terminal runs a real bash as the current user: it can read, change or delete anything that user
can, anywhere on the machine. ``SandboxedWorkspace`` (bubblewrap) is the isolated kind.
"""

from __future__ import annotations

import os.path
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from treadle.runtime.workspace.base import (
    PathOutsideWorkspaceError,
    WorkspaceError,
    WorkspacePathError,
)
from treadle.runtime.workspace.shell import ShellCommand, unsandboxed_environment

UNLIMITED = {"memory_mib": None, "processes": None, "file_size_mib": None, "cpu_seconds": None}


class LocalWorkspace:
    """A folder on this machine. Relative paths are taken from ``root``; absolute paths must
    lie inside it; symlinks are followed before the check, so a link cannot lead out.

    ``within`` (a server's ``--workspace-root``): the folder's real path must lie inside it,
    checked on opening and again on every ``resolve``, so a workspace folder replaced by a
    symlink to elsewhere is refused, not followed."""

    def __init__(
        self,
        root: str | Path,
        *,
        state_dir: str | Path | None = None,
        create: bool = False,
        within: str | Path | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """``environment``: what the caller read at its edge for the shell (PATH, HOME,
        locale: ``SHELL_ENV_NAMES``); the shell gets nothing else of this process's."""
        self._environment = unsandboxed_environment(environment)
        path = Path(root).expanduser()
        self._within = Path(os.path.realpath(within)) if within is not None else None
        if self._within is not None:
            self._check_within(path, WorkspaceError)  # before mkdir: never create a folder outside
        if create:
            path.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            raise WorkspaceError(
                f"workspace folder {path} does not exist: create it first or pass create=True"
            )
        if not path.is_dir():
            raise WorkspaceError(f"workspace {path} is not a folder: give a directory")
        self._root = path.resolve()
        if self._within is not None:
            self._check_within(self._root, WorkspaceError)
        self._state_dir = Path(state_dir).expanduser().resolve() if state_dir else None

    def _check_within(self, path: Path, error: type[WorkspaceError | WorkspacePathError]) -> None:
        assert self._within is not None
        try:
            real = Path(os.path.realpath(self._within / path))
        except (OSError, ValueError) as failure:  # a NUL byte, a name too long
            raise error(f"workspace {str(path)!r} cannot be resolved: {failure}") from None
        if real != self._within and not real.is_relative_to(self._within):
            raise error(
                f"workspace {str(path)!r} is outside the workspace root {self._within} "
                f"(its real path is {real}); give a folder inside it"
            )

    @property
    def root(self) -> Path:
        return self._root

    @property
    def state_dir(self) -> Path | None:
        return self._state_dir

    @property
    def isolation(self) -> dict[str, Any]:
        """What the tools run under, as the log records it: nothing at all."""
        return {"sandbox": "none", "network": "on", "mounts_ro": [], "limits": dict(UNLIMITED)}

    def shell_command(self, shell_argv: list[str], private_dir: Path) -> ShellCommand:
        """The shell, started as is, with the caller's shell environment."""
        return ShellCommand(
            argv=tuple(shell_argv), env=dict(self._environment), private_dir_inside=private_dir
        )

    def close(self) -> None:
        """Nothing to release: the shells are the terminal's."""

    def resolve(self, path: str | Path) -> Path:
        text = str(path)
        if not text.strip():
            raise WorkspacePathError("the path is empty: give a file or folder in the workspace")
        if "\0" in text:
            raise WorkspacePathError(f"the path {text!r} contains a NUL byte")
        candidate = Path(text)
        if not candidate.is_absolute():
            candidate = self._root / candidate
        # strict=False: a file about to be created need not exist, but every existing
        # component (symlinks included) is resolved, so an escaping link is seen here.
        try:
            resolved = candidate.resolve(strict=False)
        except (RuntimeError, OSError) as error:  # a symlink loop (RuntimeError before 3.13)
            raise WorkspacePathError(f"the path {text!r} cannot be resolved: {error}") from None
        if self._within is not None:
            # The folder itself may have been swapped for a symlink since it was opened.
            self._check_within(self._root, PathOutsideWorkspaceError)
        if resolved != self._root and not resolved.is_relative_to(self._root):
            lexical = Path(os.path.normpath(candidate))
            how = (
                "a symlink inside it leads to"
                if lexical == self._root or lexical.is_relative_to(self._root)
                else "it resolves to"
            )
            raise PathOutsideWorkspaceError(
                f"{text!r} is outside the workspace {self._root} ({how} {resolved}); "
                "use a path inside the workspace (relative paths start at its root)"
            )
        return resolved

    def display(self, path: Path) -> str:
        if path == self._root:
            return "."
        if path.is_relative_to(self._root):
            return str(path.relative_to(self._root))
        return str(path)

    def __repr__(self) -> str:
        return f"LocalWorkspace({str(self._root)!r})"
