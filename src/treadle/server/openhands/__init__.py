"""The OpenHands agent server's protocol (openhands-sdk 1.58.2's ``RemoteConversation`` and
``RemoteWorkspace``) served under ``/openhands`` on Treadle's own port, store, keys and limits:
a view of the same conversations as Treadle's API (docs/openhands.md).

Modules: ``agent_spec`` (an SDK agent spec <-> settings), ``info`` (ConversationInfo and the
status mapping), ``events`` (SDK event JSON, pages), ``keys`` (clients' model keys, memory
only), ``routes_*`` (conversations, events, the socket, the workspace), ``commands`` (workspace
commands), ``bash_events`` (the listing of their events), ``nudges`` (the socket's
wake-ups), ``requests`` (inputs), ``context`` (shared).
"""

from __future__ import annotations

from fastapi import APIRouter

import treadle
from treadle.server.openhands import (
    routes_conversations,
    routes_events,
    routes_socket,
    routes_workspace,
)
from treadle.server.openhands.context import OpenHandsState

PREFIX = "/openhands"


HEALTH_PATH = f"{PREFIX}/health"
"""Public, as the server's own ``/health`` (``RemoteWorkspace.alive`` asks it)."""


def openhands_router() -> APIRouter:
    """Every OpenHands route (the app mounts it under ``PREFIX``)."""
    router = APIRouter()

    @router.get("/health", tags=["OpenHands SDK"])
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/server_info", tags=["OpenHands SDK"])
    def server_info() -> dict[str, str]:
        """What ``RemoteWorkspace.get_server_info`` shows: this is Treadle, not the agent
        server."""
        return {
            "server": "treadle",
            "version": treadle.__version__,
            "protocol": "openhands-sdk 1.58.2",
        }

    router.include_router(routes_events.router)  # before /{conversation_id}/...
    router.include_router(routes_conversations.router)
    router.include_router(routes_socket.router)
    router.include_router(routes_workspace.router)
    return router


__all__ = ["HEALTH_PATH", "PREFIX", "OpenHandsState", "openhands_router"]
