"""What the server's routes share: the store, the run manager, the security settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request

from treadle.runtime.conversation import Conversation
from treadle.runtime.mcp_servers import check_mcp_servers
from treadle.runtime.settings import ConversationSettings, HostAllows, SettingsError, SettingsPolicy
from treadle.runtime.status import ConversationStatus, as_read, recorded_status
from treadle.server.errors import ApiError
from treadle.server.runs import RunManager
from treadle.server.security import SecurityConfig
from treadle.server.stream import Hubs
from treadle.store.base import ConversationInfo, EventStore
from treadle.store.openhands.transfer import ArchiveLimits

WORKSPACE_PATH_MAX = 1024
"""Longest workspace path a client may give (PATH_MAX is 4096; names are 255 at most)."""


def _shown(path: str) -> str:
    return repr(path if len(path) <= 80 else path[:80] + "...")


def _unusable(requested: str, error: Exception) -> ApiError:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return ApiError(
        422, "bad_workspace", f"workspace {_shown(requested)} cannot be used as a folder: {reason}"
    )


@dataclass
class ServerState:
    store: EventStore
    runs: RunManager
    security: SecurityConfig
    hubs: Hubs
    workspace_root: Path | None = None
    """When set, conversations may only have workspaces inside this folder."""
    policy: SettingsPolicy = field(
        default_factory=lambda: SettingsPolicy(allows=HostAllows(trusted=False))
    )
    """What a client's settings may reach on this server (script files, the model key)."""
    archive_limits: ArchiveLimits = field(default_factory=ArchiveLimits)
    """What unpacking one imported archive may write."""

    def check_workspace(self, settings: ConversationSettings) -> ConversationSettings:
        """``settings`` with its workspace resolved (under ``workspace_root`` when set, 422
        outside) and made: a path that cannot be a workspace folder is a 422 naming why."""
        if settings.model.script is not None:
            try:
                self.policy.allows.check_script(settings.model.script)
            except SettingsError as error:
                raise ApiError(422, "script_path_refused", str(error)) from None
        # Before anything is made: less isolation than the server allows is refused (403).
        self.policy.allows.check_sandbox(settings.sandbox)
        try:
            check_mcp_servers(settings, self.policy)  # the network beyond the limit: 403
        except SettingsError as error:
            raise ApiError(422, "mcp_refused", str(error)) from None
        return settings.model_copy(update={"workspace": self.workspace_folder(settings.workspace)})

    def workspace_folder(self, requested: str) -> str:
        """The folder a client asks for as a workspace, resolved (under ``workspace_root``
        when set, 422 outside) and made: a path that cannot be a folder is a 422 naming why."""
        if not requested.strip() or "\0" in requested or len(requested) > WORKSPACE_PATH_MAX:
            raise ApiError(
                422,
                "bad_workspace",
                f"workspace {_shown(requested)} is not a usable path: give a folder path of 1 to "
                f"{WORKSPACE_PATH_MAX} characters without NUL",
            )
        root = self.workspace_root
        path = Path(requested).expanduser() if root is None else root / requested
        # Lexically first: a path outside the root is refused before anything there is touched.
        self._check_inside(requested, Path(os.path.normpath(path)))
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError) as error:  # unreadable component, symlink loop
            raise _unusable(requested, error) from None
        self._check_inside(requested, resolved)
        try:  # made here so that a path that cannot be a folder is the client's 422
            made = not resolved.exists()
            resolved.mkdir(parents=True, exist_ok=True)
            user = self.policy.provides.sandbox_user
            if made and user is not None and os.geteuid() == 0:
                os.chown(resolved, user.uid, user.gid)  # the sandbox's user owns its files
        except OSError as error:  # a file there, a name too long, no permission...
            raise _unusable(requested, error) from None
        return str(resolved)

    def _check_inside(self, requested: str, path: Path) -> None:
        if self.workspace_root is not None and not path.is_relative_to(self.workspace_root):
            raise ApiError(
                422,
                "workspace_outside_root",
                f"workspace {_shown(requested)} is outside the server's workspace root "
                f"{self.workspace_root}; give a path inside it",
            )

    def runtime(self, conversation_id: str) -> Conversation:
        """The conversation to act on: ``ConversationNotFound`` when unknown, ``NotRunnable``
        when it cannot be run here."""
        return self.runs.conversation(conversation_id)

    def status_of(self, conversation_id: str) -> tuple[str, str | None]:
        status, reason, _here = self.status_and_here(conversation_id)
        return status, reason

    def status_and_here(
        self,
        conversation_id: str,
        info: ConversationInfo | None = None,
        holders: Mapping[str, str] | None = None,
    ) -> tuple[str, str | None, bool]:
        """Its status, the reason, and whether this server (any of its workers) runs it: a
        running conversation's lease holder is read once for both. ``info``: its row, read
        already (the status is in it); ``holders``: the lease holders of a listed page, read
        together (``RunLeases.holders``), else this one's is read when needed."""
        if info is None:
            info = self.store.get_conversation(conversation_id)
        status, reason = recorded_status(info)
        here = self.runs.is_running(conversation_id)

        def holder() -> str | None:
            if holders is not None:
                return holders.get(conversation_id)
            return self.runs.leases.holder(conversation_id)

        if status is ConversationStatus.RUNNING:
            held_by = holder()
            status, reason = as_read(status, reason, held_by is not None)
            here = here or self.runs.is_ours(held_by)
        elif not here and self.runs.owner_group is not None:
            # Another worker's run may hold it before (or after) its status says running.
            here = self.runs.is_ours(holder())
        return status.value, reason, here


def server_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.treadle
    return state
