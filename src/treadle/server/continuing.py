"""``POST /run`` with settings: continuing a stored conversation that has none (imported from
the OpenHands SDK or JSONL), checked as a create's settings are; one with settings keeps them."""

from __future__ import annotations

from treadle.data.settings import ConversationSettings
from treadle.server.errors import ApiError
from treadle.server.state import ServerState


def settings_for_unset(
    state: ServerState, conversation_id: str, settings: ConversationSettings
) -> ConversationSettings:
    """``settings`` checked against the server's policy (workspace, sandbox, MCP servers: the
    answers a create gets), for a conversation that has none: 404 when unknown, 409
    ``has_settings`` when it has its own."""
    info = state.store.get_conversation(conversation_id)
    if ConversationSettings.from_metadata(info.metadata) is not None:
        raise ApiError(
            409,
            "has_settings",
            f"conversation {conversation_id} has stored settings and keeps them (its log was "
            "made with them): run it without settings",
        )
    return state.check_workspace(settings)
