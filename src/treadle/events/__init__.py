"""The pure event core: event kinds, the tree, the projection to model messages, the audit.

No I/O here: every function takes events and returns values. Every other layer calls it.
"""

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
