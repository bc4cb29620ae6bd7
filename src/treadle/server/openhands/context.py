"""What the OpenHands routes share besides the server's own state: the clients' model keys
(memory only), the per-conversation locks and the workspace commands started here."""

from __future__ import annotations

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


def openhands_state(request: Request) -> OpenHandsState:
    return request.app.state.openhands


State = Annotated[ServerState, Depends(server_state)]
OpenHands = Annotated[OpenHandsState, Depends(openhands_state)]
