"""The typed Python client of the agent server (httpx + websockets)."""

from treadle.client.conversation import RemoteConversation, TreadleClient
from treadle.client.http import RemoteError
from treadle.client.stream import EventSubscription, StreamGap

__all__ = ["EventSubscription", "RemoteConversation", "RemoteError", "StreamGap", "TreadleClient"]
