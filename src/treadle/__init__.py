"""Treadle: a durable, branchable, auditable event stream runtime for AI agents.

The front door: ``from treadle import Conversation, ConversationSettings, open_store`` for a
local run, ``TreadleClient`` for a server. Names load on first use (module ``__getattr__``), so
``import treadle`` stays cheap and a client never loads the runtime. The pure event core lives
in :mod:`treadle.events`; storage, runtime and server build on it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (checkers know the idiom)
__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # a local run
    "Conversation": "treadle.runtime.conversation",
    "ConversationParts": "treadle.runtime.parts",
    "build_parts": "treadle.runtime.parts",
    "RunExtension": "treadle.runtime.extensions.base",
    "RunScope": "treadle.runtime.extensions.base",
    "SettingsPolicy": "treadle.runtime.settings",
    "HostAllows": "treadle.runtime.settings",
    "HostProvides": "treadle.runtime.settings",
    "open_store": "treadle.store.urls",
    "EventStore": "treadle.store.base",
    # settings and statuses (data: the same for a local run and a server)
    "ConversationSettings": "treadle.data.settings",
    "ModelChoice": "treadle.data.settings",
    "ConfirmationPolicy": "treadle.data.settings",
    "ConversationStatus": "treadle.data.status",
    "ConversationHandle": "treadle.api.handle",
    "TranscriptItem": "treadle.data.transcript",
    "TranscriptPage": "treadle.data.transcript",
    # the events
    "Event": "treadle.events.model",
    "EventTree": "treadle.events.tree",
    "audit_events": "treadle.events.audit",
    # the typed client and its errors
    "TreadleClient": "treadle.client.conversation",
    "RemoteConversation": "treadle.client.conversation",
    "RemoteError": "treadle.client.http",
    "NotFound": "treadle.client.http",
    "Conflict": "treadle.client.http",
    "Unauthorized": "treadle.client.http",
    "InvalidRequest": "treadle.client.http",
    "Unavailable": "treadle.client.http",
    # errors every layer raises
    "TreadleError": "treadle.errors",
    "ContractError": "treadle.errors",
}

__all__ = [
    "ConfirmationPolicy",
    "Conflict",
    "ContractError",
    "Conversation",
    "ConversationHandle",
    "ConversationParts",
    "ConversationSettings",
    "ConversationStatus",
    "Event",
    "EventStore",
    "EventTree",
    "HostAllows",
    "HostProvides",
    "InvalidRequest",
    "ModelChoice",
    "NotFound",
    "RemoteConversation",
    "RemoteError",
    "RunExtension",
    "RunScope",
    "SettingsPolicy",
    "TranscriptItem",
    "TranscriptPage",
    "TreadleClient",
    "TreadleError",
    "Unauthorized",
    "Unavailable",
    "__version__",
    "audit_events",
    "build_parts",
    "open_store",
]
"""The same names as ``_EXPORTS`` (a test checks), spelled out for linters."""

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads them
    from typing import Any

    from treadle.api.handle import ConversationHandle
    from treadle.client.conversation import RemoteConversation, TreadleClient
    from treadle.client.http import (
        Conflict,
        InvalidRequest,
        NotFound,
        RemoteError,
        Unauthorized,
        Unavailable,
    )
    from treadle.data.settings import ConfirmationPolicy, ConversationSettings, ModelChoice
    from treadle.data.status import ConversationStatus
    from treadle.data.transcript import TranscriptItem, TranscriptPage
    from treadle.errors import ContractError, TreadleError
    from treadle.events.audit import audit_events
    from treadle.events.model import Event
    from treadle.events.tree import EventTree
    from treadle.runtime.conversation import Conversation
    from treadle.runtime.extensions.base import RunExtension, RunScope
    from treadle.runtime.parts import ConversationParts, build_parts
    from treadle.runtime.settings import SettingsPolicy
    from treadle.store.base import EventStore
    from treadle.store.urls import open_store


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'treadle' has no attribute {name!r}")
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
