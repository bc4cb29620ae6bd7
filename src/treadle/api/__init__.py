"""``treadle.api``: what the agent server and the typed client speak: request and response
bodies, stream frames, the error body, and (re-exported) the shared data models of
:mod:`treadle.data` they carry. Pydantic and the event model only: it imports nothing of the
runtime, the store or the server, so a client loads none of them; the runtime in turn never
imports this package.

Names load on first use (module ``__getattr__``), as in :mod:`treadle`: importing one
submodule (``treadle.api.requests``, ``treadle.data.ids``) does not load every model, so a
command-line start stays cheap."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

_EXPORTS: dict[str, str] = {
    "ErrorBody": "treadle.api.errors",
    "ErrorDetail": "treadle.api.errors",
    "CONVERSATION_ID_MAX": "treadle.data.ids",
    "CONVERSATION_ID_RULE": "treadle.data.ids",
    "conversation_id_problem": "treadle.data.ids",
    "MCPServerConfig": "treadle.data.mcp",
    "mcp_tool_name": "treadle.data.mcp",
    "SEQ_MAX": "treadle.api.requests",
    "SEQ_MIN": "treadle.api.requests",
    "TITLE_MAX": "treadle.api.requests",
    "ActionChoice": "treadle.api.requests",
    "ConversationId": "treadle.api.requests",
    "CreateConversation": "treadle.api.requests",
    "ForkRequest": "treadle.api.requests",
    "MoveHead": "treadle.api.requests",
    "RaiseBudget": "treadle.api.requests",
    "RejectRequest": "treadle.api.requests",
    "RestoreRequest": "treadle.api.requests",
    "RunRequest": "treadle.api.requests",
    "SendMessage": "treadle.api.requests",
    "surrogate_in": "treadle.api.requests",
    "BUILTIN_TOOL_NAMES": "treadle.data.settings",
    "DEFAULT_SYSTEM_PROMPT": "treadle.data.settings",
    "SETTINGS_KEY": "treadle.data.settings",
    "ConfirmationPolicy": "treadle.data.settings",
    "ConversationSettings": "treadle.data.settings",
    "ModelChoice": "treadle.data.settings",
    "SandboxLimits": "treadle.data.settings",
    "SandboxSettings": "treadle.data.settings",
    "ScriptedCall": "treadle.data.settings",
    "ScriptedResponse": "treadle.data.settings",
    "SnapshotSettings": "treadle.data.settings",
    "ConversationStatus": "treadle.data.status",
    "EventFrame": "treadle.api.stream",
    "OutputFrame": "treadle.api.stream",
    "RunFinishedFrame": "treadle.api.stream",
    "StatusView": "treadle.api.stream",
    "StreamFrame": "treadle.api.stream",
    "TransientFrame": "treadle.api.stream",
    "typed_frame": "treadle.api.stream",
    "TranscriptPage": "treadle.data.transcript",
    "Accepted": "treadle.data.views",
    "AuditView": "treadle.data.views",
    "ConversationList": "treadle.data.views",
    "ConversationView": "treadle.data.views",
    "CountView": "treadle.data.views",
    "DiffView": "treadle.data.views",
    "EventItem": "treadle.data.views",
    "EventPage": "treadle.data.views",
    "EventPageView": "treadle.data.views",
    "RestoreView": "treadle.data.views",
    "SnapshotList": "treadle.data.views",
    "SnapshotView": "treadle.data.views",
    "StoredEventView": "treadle.data.views",
    "TreeView": "treadle.data.views",
    "ViolationView": "treadle.data.views",
}

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "CONVERSATION_ID_MAX",
    "CONVERSATION_ID_RULE",
    "DEFAULT_SYSTEM_PROMPT",
    "SEQ_MAX",
    "SEQ_MIN",
    "SETTINGS_KEY",
    "TITLE_MAX",
    "Accepted",
    "ActionChoice",
    "AuditView",
    "ConfirmationPolicy",
    "ConversationId",
    "ConversationList",
    "ConversationSettings",
    "ConversationStatus",
    "ConversationView",
    "CountView",
    "CreateConversation",
    "DiffView",
    "ErrorBody",
    "ErrorDetail",
    "EventFrame",
    "EventItem",
    "EventPage",
    "EventPageView",
    "ForkRequest",
    "MCPServerConfig",
    "ModelChoice",
    "MoveHead",
    "OutputFrame",
    "RaiseBudget",
    "RejectRequest",
    "RestoreRequest",
    "RestoreView",
    "RunFinishedFrame",
    "RunRequest",
    "SandboxLimits",
    "SandboxSettings",
    "ScriptedCall",
    "ScriptedResponse",
    "SendMessage",
    "SnapshotList",
    "SnapshotSettings",
    "SnapshotView",
    "StatusView",
    "StoredEventView",
    "StreamFrame",
    "TranscriptPage",
    "TransientFrame",
    "TreeView",
    "ViolationView",
    "conversation_id_problem",
    "mcp_tool_name",
    "surrogate_in",
    "typed_frame",
]
"""The same names as ``_EXPORTS`` (a test checks), spelled out for linters."""

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ loads them
    from typing import Any

    from treadle.api.errors import ErrorBody, ErrorDetail
    from treadle.api.requests import (
        SEQ_MAX,
        SEQ_MIN,
        TITLE_MAX,
        ActionChoice,
        ConversationId,
        CreateConversation,
        ForkRequest,
        MoveHead,
        RaiseBudget,
        RejectRequest,
        RestoreRequest,
        RunRequest,
        SendMessage,
        surrogate_in,
    )
    from treadle.api.stream import (
        EventFrame,
        OutputFrame,
        RunFinishedFrame,
        StatusView,
        StreamFrame,
        TransientFrame,
        typed_frame,
    )
    from treadle.data.ids import CONVERSATION_ID_MAX, CONVERSATION_ID_RULE, conversation_id_problem
    from treadle.data.mcp import MCPServerConfig, mcp_tool_name
    from treadle.data.settings import (
        BUILTIN_TOOL_NAMES,
        DEFAULT_SYSTEM_PROMPT,
        SETTINGS_KEY,
        ConfirmationPolicy,
        ConversationSettings,
        ModelChoice,
        SandboxLimits,
        SandboxSettings,
        ScriptedCall,
        ScriptedResponse,
        SnapshotSettings,
    )
    from treadle.data.status import ConversationStatus
    from treadle.data.transcript import TranscriptPage
    from treadle.data.views import (
        Accepted,
        AuditView,
        ConversationList,
        ConversationView,
        CountView,
        DiffView,
        EventItem,
        EventPage,
        EventPageView,
        RestoreView,
        SnapshotList,
        SnapshotView,
        StoredEventView,
        TreeView,
        ViolationView,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'treadle.api' has no attribute {name!r}")
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
