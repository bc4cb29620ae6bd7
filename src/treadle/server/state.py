"""What the server's routes share: the store, the run manager, the security settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request

from treadle.runtime.conversation import Conversation, ConversationError
from treadle.runtime.llm.base import ModelError
from treadle.runtime.settings import ConversationSettings, SettingsError, SettingsPolicy
from treadle.runtime.status import ConversationStatus, read_status
from treadle.runtime.workspace.base import WorkspaceError, WorkspacePathError
from treadle.server.errors import ApiError
from treadle.server.runs import RunManager
from treadle.server.security import SecurityConfig
from treadle.server.stream import Hubs
from treadle.store.base import EventStore

NOT_RUNNABLE = (ConversationError, ModelError, SettingsError, WorkspaceError, WorkspacePathError)
"""Why a stored conversation cannot be opened here (its settings reach what this server
refuses, or its workspace moved): 409, never a 500."""


@dataclass
class ServerState:
    store: EventStore
    runs: RunManager
    security: SecurityConfig
    hubs: Hubs
    workspace_root: Path | None = None
    """When set, conversations may only have workspaces inside this folder."""
    policy: SettingsPolicy = field(default_factory=lambda: SettingsPolicy(trusted=False))
    """What a client's settings may reach on this server (script files, the model key)."""

    def check_workspace(self, settings: ConversationSettings) -> ConversationSettings:
        """``settings`` with its workspace resolved under ``workspace_root`` (422 outside)."""
        if settings.model.script is not None:
            try:
                self.policy.check_script(settings.model.script)
            except SettingsError as error:
                raise ApiError(422, "script_path_refused", str(error)) from None
        if self.workspace_root is None:
            return settings
        requested = Path(settings.workspace)
        resolved = (self.workspace_root / requested).resolve()
        if not resolved.is_relative_to(self.workspace_root):
            raise ApiError(
                422,
                "workspace_outside_root",
                f"workspace {settings.workspace!r} is outside the server's workspace root "
                f"{self.workspace_root}; give a path inside it",
            )
        return settings.model_copy(update={"workspace": str(resolved)})

    def runtime(self, conversation_id: str) -> Conversation:
        """The conversation to act on: 404 when unknown, 409 when it cannot be run here."""
        self.store.get_conversation(conversation_id)
        try:
            return self.runs.conversation(conversation_id)
        except NOT_RUNNABLE as error:
            raise ApiError(409, "not_runnable", str(error)) from None

    def status_of(self, conversation_id: str) -> tuple[str, str | None]:
        status, reason = read_status(self.store, conversation_id)
        if status is ConversationStatus.RUNNING and not self.runs.leases.is_held(conversation_id):
            reason = (
                "interrupted: the process that ran it stopped without ending the run (its run "
                "lease expired); run it again to continue"
            )
        return status.value, reason

    @staticmethod
    def check_pending(conversation: Conversation, action_ids: Sequence[str] | None) -> None:
        """409 unless the calls are waiting for confirmation. Call it holding the run lease:
        a call without a result while a run holds it is running, not waiting."""
        pending = {action.id for action in conversation.pending_actions()}
        if not pending:
            raise ApiError(409, "nothing_pending", "no call is waiting for confirmation")
        status, _reason = conversation.stored_status()
        if status is not ConversationStatus.WAITING_FOR_CONFIRMATION:
            raise ApiError(
                409,
                "not_waiting",
                f"the calls without a result are not waiting for confirmation (status "
                f"{status.value}): only a conversation waiting for confirmation takes a "
                "confirm or a reject",
            )
        unknown = [a for a in action_ids or () if a not in pending]
        if unknown:
            raise ApiError(
                409,
                "not_pending",
                f"not pending: {', '.join(unknown)}; pending: {', '.join(pending)}",
            )


def server_state(request: Request) -> ServerState:
    return request.app.state.treadle
