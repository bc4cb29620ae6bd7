"""What the OpenHands routes share besides the server's own state: the clients' model keys
(memory only), the per-conversation locks and the workspace commands started here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from treadle.server.openhands.commands import Commands
from treadle.server.openhands.keys import ClientKeys
from treadle.server.openhands.nudges import Nudges
from treadle.server.openhands.requests import ConversationLocks
from treadle.server.state import ServerState, server_state


@dataclass
class OpenHandsState:
    keys: ClientKeys = field(default_factory=ClientKeys)
    locks: ConversationLocks = field(default_factory=ConversationLocks)
    commands: Commands = field(default_factory=Commands)
    nudges: Nudges = field(default_factory=Nudges)

    @contextmanager
    def changing(self, conversation_id: str) -> Iterator[None]:
        """Serve a request that changes the conversation: after the others on it (``locks``);
        its client no longer waits for a run's end (``Nudges``)."""
        with self.locks.held(conversation_id):
            self.nudges.settled(conversation_id)
            yield


def openhands_state(request: Request) -> OpenHandsState:
    state: OpenHandsState = request.app.state.openhands
    return state


State = Annotated[ServerState, Depends(server_state)]
OpenHands = Annotated[OpenHandsState, Depends(openhands_state)]
