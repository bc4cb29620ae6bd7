"""What the audit reads of an event: its place in the tree and its link fields, nothing else.

``AuditFacts`` is the audit's own small record (a slotted object, no payload, no validation),
so that a log can be audited from a store's columns without decoding every event
(``EventStore.audit_facts``), and so that an audit kept for a growing log
(``IncrementalAudit``) holds a fraction of the memory of the events themselves.
"""

from __future__ import annotations

from typing import Any

from treadle.events.model import EventBase


class AuditFacts:
    """The fields of one event that the audit-checkable contracts read (docs/contracts.md:
    TREE-*, LINK-*, PROJECT-BATCH, PROJECT-SHARED-TEXT, PROJECT-DUP-CALL, APPEND-DUP-ID,
    CONDENSE-*: a condensation's ``forgotten`` ids).

    ``tool_call_id`` and ``tool_name`` are "" and ``action_id`` and ``llm_response_id`` None
    for kinds that do not have them; ``has_shared_text`` is an action's thought-or-reasoning flag."""

    __slots__ = (
        "action_id",
        "forgotten",
        "has_shared_text",
        "id",
        "kind",
        "llm_response_id",
        "parent_id",
        "source",
        "tool_call_id",
        "tool_name",
    )

    def __init__(
        self,
        id: str,
        parent_id: str | None,
        kind: str,
        source: str,
        tool_call_id: str = "",
        tool_name: str = "",
        action_id: str | None = None,
        llm_response_id: str | None = None,
        has_shared_text: bool = False,
        forgotten: tuple[str, ...] = (),
    ) -> None:
        self.id = id
        self.parent_id = parent_id
        self.kind = kind
        self.source = source
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name
        self.action_id = action_id
        self.llm_response_id = llm_response_id
        self.has_shared_text = has_shared_text
        self.forgotten = forgotten

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AuditFacts):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable-looking record: compared, not hashed

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"AuditFacts({fields})"


def facts_of(event: EventBase | AuditFacts) -> AuditFacts:
    """The audit's record of a decoded event (a record is returned as it is)."""
    if isinstance(event, AuditFacts):
        return event
    fields: dict[str, Any] = event.__dict__
    thought = fields.get("thought")
    return AuditFacts(
        event.id,
        event.parent_id,
        event.kind,
        fields.get("source", ""),
        fields.get("tool_call_id") or "",
        fields.get("tool_name") or "",
        fields.get("action_id"),
        fields.get("llm_response_id"),
        bool(thought) or bool(fields.get("reasoning")),
        tuple(fields.get("forgotten_event_ids") or ()),
    )


def facts_from_row(
    event_id: str,
    parent_id: str | None,
    kind: str,
    source: str,
    links: tuple[Any, Any, Any, Any, Any, Any] | None,
) -> AuditFacts:
    """A record from a store row: its columns and, for actions and results, the payload's
    (tool_call_id, tool_name, action_id, llm_response_id, thought, reasoning)."""
    if links is None:
        return AuditFacts(event_id, parent_id, kind, source)
    call, name, action_id, response, thought, reasoning = links
    return AuditFacts(
        event_id,
        parent_id,
        kind,
        source,
        call or "",
        name or "",
        action_id,
        response,
        bool(thought) or bool(reasoning),
    )


__all__ = ["AuditFacts", "facts_from_row", "facts_of"]
