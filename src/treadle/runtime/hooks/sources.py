"""Where hooks come from: a settings file the user names (``--hooks FILE``) and the workspace's
own ``.treadle/settings.json``, which the agent can write and so runs only when trusted.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from treadle.data.hooks import HookSettings
from treadle.errors import TreadleError
from treadle.events.json_limits import load_json
from treadle.files import read_regular_file
from treadle.runtime.workspace.base import Workspace, WorkspacePathError

WORKSPACE_SETTINGS = ".treadle/settings.json"
"""The workspace's own settings file, read for hooks with ``--trust-workspace-hooks``."""
MAX_SETTINGS_BYTES = 1024 * 1024


class HookSettingsError(TreadleError, ValueError):
    """A hook settings file that cannot be read or does not hold hooks Treadle can run."""


def read_hook_file(path: str | Path) -> HookSettings:
    """The hooks of the settings file at ``path`` (Claude Code's ``settings.json`` shape, or
    its ``hooks`` object alone)."""
    try:
        data = load_json(read_regular_file(path, MAX_SETTINGS_BYTES))
    # FileRefused, JSON, UTF-8 and JsonLimitError (a file nesting 100,000 deep, which ended
    # json.loads in a RecursionError) are ValueErrors.
    except (OSError, ValueError) as error:
        raise HookSettingsError(f"hook settings {path}: {error}") from None
    try:
        return HookSettings.from_file_data(data)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(map(str, problem["loc"]))
        raise HookSettingsError(
            f"hook settings {path}: {where + ': ' if where else ''}{problem['msg']}"
        ) from None


def workspace_hook_file(workspace: Workspace) -> Path | None:
    """The workspace's settings file when it exists inside the workspace (a symlink leading
    out of it is refused, as for any path the agent made)."""
    try:
        path = workspace.resolve(WORKSPACE_SETTINGS)
    except WorkspacePathError as error:
        raise HookSettingsError(f"{WORKSPACE_SETTINGS}: {error}") from None
    return path if path.is_file() else None


def workspace_declares_hooks(path: Path) -> bool:
    """Whether the workspace's settings file names hooks (read only to say they were ignored)."""
    try:
        data = load_json(read_regular_file(path, MAX_SETTINGS_BYTES))
    except (OSError, ValueError):
        return True  # unreadable: said as ignored all the same
    return isinstance(data, dict) and bool(data.get("hooks"))
