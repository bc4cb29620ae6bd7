"""The pure event core: event kinds, the tree, the projection to model messages, the audit.

No I/O here: every function takes events and returns values. Every other layer calls it.

Its names are loaded when first used (``from treadle.events import Event``), so a module that
needs only a small part (``events.fact_keys``) does not pay for the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from treadle.events.audit import AuditReport, Violation, audit_events
    from treadle.events.links import pending_actions
    from treadle.events.model import (
        ROOT,
        ActionEvent,
        AgentErrorEvent,
        CondensationEvent,
        Event,
        EventBase,
        ForeignEvent,
        MessageEvent,
        ObservationEvent,
        PauseEvent,
        StateChangeEvent,
        SystemPromptEvent,
        TokenUsage,
        UserRejectionEvent,
        event_from_dict,
        event_from_json,
        event_to_dict,
        event_to_json,
        events_json_schema,
    )
    from treadle.events.projection import count_tool_calls, project_messages
    from treadle.events.tree import EventTree

_HOME = {
    "AuditReport": "audit",
    "Violation": "audit",
    "audit_events": "audit",
    "pending_actions": "links",
    "count_tool_calls": "projection",
    "project_messages": "projection",
    "EventTree": "tree",
}
"""Where each exported name lives; the rest are ``events.model``'s."""

__all__ = [
    "ROOT",
    "ActionEvent",
    "AgentErrorEvent",
    "AuditReport",
    "CondensationEvent",
    "Event",
    "EventBase",
    "EventTree",
    "ForeignEvent",
    "MessageEvent",
    "ObservationEvent",
    "PauseEvent",
    "StateChangeEvent",
    "SystemPromptEvent",
    "TokenUsage",
    "UserRejectionEvent",
    "Violation",
    "audit_events",
    "count_tool_calls",
    "event_from_dict",
    "event_from_json",
    "event_to_dict",
    "event_to_json",
    "events_json_schema",
    "pending_actions",
    "project_messages",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'treadle.events' has no attribute {name!r}")
    module = importlib.import_module(f"treadle.events.{_HOME.get(name, 'model')}")
    value = getattr(module, name)
    globals()[name] = value  # once: later lookups do not come here
    return value
