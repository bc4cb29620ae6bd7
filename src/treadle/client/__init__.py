"""The typed Python client of the agent server (httpx + websockets). It loads no runtime,
store or server module: its models are ``treadle.api``'s and ``treadle.events``'."""

from treadle.client.conversation import RemoteConversation, TreadleClient
from treadle.client.http import (
    AuthError,
    BadResponse,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    RemoteError,
    ServerFailed,
    TooLarge,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from treadle.client.stream import (
    EventSubscription,
    StreamClosed,
    StreamGap,
    StreamRefused,
    StreamUnavailable,
)

__all__ = [
    "AuthError",
    "BadResponse",
    "Conflict",
    "ConnectionFailed",
    "EventSubscription",
    "InvalidRequest",
    "NotFound",
    "RemoteConversation",
    "RemoteError",
    "ServerFailed",
    "StreamClosed",
    "StreamGap",
    "StreamRefused",
    "StreamUnavailable",
    "TooLarge",
    "TooManyRequests",
    "TreadleClient",
    "Unauthorized",
    "Unavailable",
]
