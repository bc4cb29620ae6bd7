"""Each OpenHands SDK event kind against its Treadle kind: the fields Treadle reads from an SDK
event, and the SDK event Treadle writes for its own fields (the "canonical" form).

``codec`` makes the pair lossless; this module only knows the kinds (SDK 1.58.2).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from treadle.events.frozen_json import thaw
from treadle.events.model import EventBase, ForeignEvent
from treadle.store.openhands.rendering import (
    content_parts,
    image_urls,
    joined_text,
    observation_parts,
    text_part,
)

SdkEvent = dict[str, Any]
Fields = dict[str, Any]

STATE_UPDATE_KIND = "ConversationStateUpdateEvent"
CONVERSATION_ERROR_KIND = "ConversationErrorEvent"
NOT_TREE_NODES = frozenset({STATE_UPDATE_KIND, CONVERSATION_ERROR_KIND})
"""Kinds the SDK skips when it falls back to "the last event" for a null saved head."""

FOREIGN_OBSERVATION_KIND = "ClientToolObservation"
"""The SDK's plain observation class (no fields of its own, base rendering): how a result
Treadle made is written, since the SDK loads only observation kinds it knows."""

_SECURITY_RISKS = {"UNKNOWN": "unknown", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}


class InvalidSdkEvent(ValueError):
    """An SDK event that lacks a field its kind requires, or has one of the wrong type."""


class NotModelled(ValueError):
    """A valid SDK event that Treadle cannot model: it is kept as ``foreign``."""


class ReadFrom:
    """Typed reads of an SDK event's fields; a wrong or missing one raises InvalidSdkEvent."""

    def __init__(self, data: Mapping[str, Any], where: str = "") -> None:
        self.data = data
        self.where = where

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = self.data.get(key, default)
        if value is not default and not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise InvalidSdkEvent(
                f"field '{self.where}{key}' should be {names}, got {json.dumps(value)[:60]}"
            )
        return value

    def need(self, key: str, kind: type | tuple[type, ...]) -> Any:
        if key not in self.data or self.data[key] is None:
            raise InvalidSdkEvent(f"missing field '{self.where}{key}'")
        return self.get(key, kind)

    def at(self, key: str) -> ReadFrom:
        return ReadFrom(self.need(key, dict), f"{self.where}{key}.")

    def parts(self, key: str) -> list[Mapping[str, Any]]:
        """A content list; the SDK also accepts a plain string there (one text part)."""
        value = self.get(key, (list, str), [])
        if isinstance(value, str):
            return [text_part(value)]
        if not all(isinstance(part, dict) for part in value):
            raise InvalidSdkEvent(f"field '{self.where}{key}' should be a list of content parts")
        parts: list[Mapping[str, Any]] = value
        return parts


@dataclass(frozen=True, slots=True)
class KindMapping:
    """One SDK kind <-> one Treadle kind.

    ``read`` gives the Treadle fields of an SDK event (common fields excluded) and any notice;
    ``write`` gives the SDK fields of a Treadle event (common fields and ``kind`` excluded).
    """

    sdk_kind: str
    treadle_kind: str
    default_source: str | None
    """The SDK's default ``source`` for the kind; None: the SDK requires one."""
    read: Callable[[ReadFrom], tuple[Fields, str | None]]
    write: Callable[[Any], SdkEvent]
    fields: tuple[str, ...] = ()
    """The SDK class's own fields in its declaration order (how the SDK writes them, after
    the common ones and before ``kind``): writing in that order makes round trips byte-equal."""

    def key_rank(self) -> dict[str, int]:
        return {key: rank for rank, key in enumerate((*_COMMON_FIELDS, *self.fields))}


_COMMON_FIELDS = ("id", "timestamp", "source", "parent_id")


# -- message, system prompt -------------------------------------------------------------------


def _read_message(event: ReadFrom) -> tuple[Fields, str | None]:
    message = event.at("llm_message")
    role = message.need("role", str)
    if role not in ("user", "assistant"):
        raise NotModelled(f"Treadle messages are user or assistant text, not role {role!r}")
    if message.get("tool_calls", list) or message.get("tool_call_id", str):
        raise NotModelled("a Treadle message carries no tool calls (they are action events)")
    content = message.parts("content")
    extended = event.parts("extended_content")
    skills = event.get("activated_skills", list, [])
    if not all(isinstance(name, str) for name in skills):
        raise InvalidSdkEvent("field 'activated_skills' should be a list of skill names")
    return {
        "role": role,
        "text": joined_text(content),
        "image_urls": image_urls([*content, *extended]),
        "llm_response_id": event.get("llm_response_id", str),
        "reasoning": message.get("reasoning_content", str),
        "activated_skills": skills,
        # Each added text stays apart, as the SDK sends it after the message's content.
        "extended_content": [str(part.get("text", "")) for part in extended if _is_text(part)],
    }, None


def _is_text(part: Mapping[str, Any]) -> bool:
    return part.get("type") == "text"


def _write_message(event: Any) -> SdkEvent:
    message: SdkEvent = {"role": event.role, "content": content_parts(event.text, event.image_urls)}
    if event.reasoning is not None:
        message["reasoning_content"] = event.reasoning
    message["thinking_blocks"] = []
    fields: SdkEvent = {"llm_message": message}
    if event.llm_response_id is not None:
        fields["llm_response_id"] = event.llm_response_id
    fields["activated_skills"] = list(event.activated_skills)
    fields["extended_content"] = [text_part(text) for text in event.extended_content]
    return fields


def _read_system_prompt(event: ReadFrom) -> tuple[Fields, str | None]:
    text = event.at("system_prompt").need("text", str)
    dynamic = event.get("dynamic_context", dict)
    # Sent as a second text of the same system message: Treadle's ``context`` is sent so.
    context = None if dynamic is None else ReadFrom(dynamic, "dynamic_context.").need("text", str)
    # The SDK keeps tool classes, not JSON schemas: they stay in ``extra`` as written.
    event.need("tools", list)
    return {"text": text, "context": context}, None


def _write_system_prompt(event: Any) -> SdkEvent:
    fields: SdkEvent = {"system_prompt": text_part(event.text), "tools": []}
    if event.context is not None:
        fields["dynamic_context"] = text_part(event.context)
    return fields


# -- calls and their results ------------------------------------------------------------------


def _read_action(event: ReadFrom) -> tuple[Fields, str | None]:
    call = event.at("tool_call")
    raw = call.need("arguments", str)
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    risk = event.get("security_risk", str)
    if risk is not None and risk not in _SECURITY_RISKS:
        raise InvalidSdkEvent(f"field 'security_risk' has unknown value {risk!r}")
    return {
        "llm_response_id": event.need("llm_response_id", str),
        "tool_call_id": event.need("tool_call_id", str),
        "tool_name": event.need("tool_name", str),
        "arguments": parsed if isinstance(parsed, dict) else None,
        "raw_arguments": raw,
        "thought": joined_text(event.parts("thought")),
        "reasoning": event.get("reasoning_content", str),
        "security_risk": None if risk is None else _SECURITY_RISKS[risk],
    }, None


def _write_action(event: Any) -> SdkEvent:
    fields: SdkEvent = {"thought": content_parts(event.thought)}
    if event.reasoning is not None:
        fields["reasoning_content"] = event.reasoning
    fields["thinking_blocks"] = []
    fields["tool_name"] = event.tool_name
    fields["tool_call_id"] = event.tool_call_id
    fields["tool_call"] = {
        "id": event.tool_call_id,
        "name": event.tool_name,
        "arguments": event.raw_arguments,
        "origin": "completion",
    }
    fields["llm_response_id"] = event.llm_response_id
    if event.security_risk is not None:
        fields["security_risk"] = event.security_risk.upper()
    return fields


def _read_observation(event: ReadFrom) -> tuple[Fields, str | None]:
    observation = event.need("observation", dict)
    fields = ReadFrom(observation, "observation.")
    content = fields.parts("content")
    fields.get("metadata", dict)  # the terminal's rendering reads it
    parts, exact = observation_parts(observation, content)
    parts = [*parts, *event.parts("extended_content")]
    notice = None
    if not exact:
        notice = (
            f"the SDK renders a {observation.get('kind')} with tool code Treadle does not "
            "mirror; its text here is the base rendering (error header and content)"
        )
    return {
        "action_id": event.need("action_id", str),
        "tool_call_id": event.need("tool_call_id", str),
        "tool_name": event.need("tool_name", str),
        "content": joined_text(parts),
        "image_urls": image_urls(parts),
        "is_error": bool(observation.get("is_error", False)),
    }, notice


def _write_observation(event: Any) -> SdkEvent:
    return {
        "tool_name": event.tool_name,
        "tool_call_id": event.tool_call_id,
        "observation": {
            "content": content_parts(event.content, event.image_urls),
            "is_error": event.is_error,
            "kind": FOREIGN_OBSERVATION_KIND,
        },
        "action_id": event.action_id,
        "extended_content": [],
    }


def _read_agent_error(event: ReadFrom) -> tuple[Fields, str | None]:
    # The SDK's AgentErrorEvent has no action id: it answers its call by tool_call_id.
    return {
        "tool_name": event.need("tool_name", str),
        "tool_call_id": event.need("tool_call_id", str),
        "error": event.need("error", str),
    }, None


def _write_agent_error(event: Any) -> SdkEvent:
    return {"tool_name": event.tool_name, "tool_call_id": event.tool_call_id, "error": event.error}


def _read_rejection(event: ReadFrom) -> tuple[Fields, str | None]:
    rejected_by = event.get("rejection_source", str, "user")
    if rejected_by not in ("user", "hook"):
        raise InvalidSdkEvent(f"field 'rejection_source' has unknown value {rejected_by!r}")
    return {
        "tool_name": event.need("tool_name", str),
        "tool_call_id": event.need("tool_call_id", str),
        "action_id": event.need("action_id", str),
        "reason": event.get("rejection_reason", str, "User rejected the action"),
        "rejected_by": rejected_by,
    }, None


def _write_rejection(event: Any) -> SdkEvent:
    return {
        "tool_name": event.tool_name,
        "tool_call_id": event.tool_call_id,
        "rejection_reason": event.reason,
        "rejection_source": event.rejected_by,
        "action_id": event.action_id,
    }


# -- condensation, pause, state ---------------------------------------------------------------


def _read_condensation(event: ReadFrom) -> tuple[Fields, str | None]:
    forgotten = event.get("forgotten_event_ids", list, [])
    if not all(isinstance(item, str) for item in forgotten):
        raise InvalidSdkEvent("field 'forgotten_event_ids' should be a list of event ids")
    return {
        # The SDK holds a set and writes it in set order; the order as written is kept.
        "forgotten_event_ids": forgotten,
        "summary": event.get("summary", str),
        "summary_offset": event.get("summary_offset", int),
        "llm_response_id": event.need("llm_response_id", str),
    }, None


def _write_condensation(event: Any) -> SdkEvent:
    fields: SdkEvent = {"forgotten_event_ids": list(event.forgotten_event_ids)}
    if event.summary is not None:
        fields["summary"] = event.summary
    if event.summary_offset is not None:
        fields["summary_offset"] = event.summary_offset
    # Required by the SDK; a Treadle condensation may have none (the side table restores it).
    fields["llm_response_id"] = event.llm_response_id or event.id
    return fields


def _read_state_update(event: ReadFrom) -> tuple[Fields, str | None]:
    return {"key": event.need("key", str), "value": event.data.get("value")}, None


def _write_state_update(event: Any) -> SdkEvent:
    return {"key": event.key, "value": thaw(event.value)}


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _nothing(_event: Any) -> Any:
    return {}


def _read_nothing(_event: ReadFrom) -> tuple[Fields, str | None]:
    return {}, None


MAPPINGS: tuple[KindMapping, ...] = (
    KindMapping(
        "MessageEvent", "message", None, _read_message, _write_message,
        fields=_names("llm_message llm_response_id activated_skills extended_content sender "
                      "critic_result"),
    ),
    KindMapping(
        "SystemPromptEvent", "system_prompt", "agent", _read_system_prompt, _write_system_prompt,
        fields=_names("system_prompt tools dynamic_context"),
    ),
    KindMapping(
        "ActionEvent", "action", "agent", _read_action, _write_action,
        fields=_names("thought reasoning_content thinking_blocks responses_reasoning_item "
                      "action tool_name tool_call_id tool_call llm_response_id security_risk "
                      "critic_result summary"),
    ),
    KindMapping(
        "ObservationEvent", "observation", "environment", _read_observation, _write_observation,
        fields=_names("tool_name tool_call_id observation action_id extended_content"),
    ),
    KindMapping(
        "AgentErrorEvent", "agent_error", "agent", _read_agent_error, _write_agent_error,
        fields=_names("tool_name tool_call_id error classification"),
    ),
    KindMapping(
        "UserRejectObservation", "user_rejection", "environment", _read_rejection,
        _write_rejection,
        fields=_names("tool_name tool_call_id rejection_reason rejection_source action_id"),
    ),
    KindMapping(
        "Condensation", "condensation", "environment", _read_condensation, _write_condensation,
        fields=_names("forgotten_event_ids summary summary_offset llm_response_id"),
    ),
    KindMapping("PauseEvent", "pause", "user", _read_nothing, _nothing),
    KindMapping(
        STATE_UPDATE_KIND, "state_change", "environment", _read_state_update,
        _write_state_update, fields=_names("key value"),
    ),
)  # fmt: skip
BY_SDK_KIND: dict[str, KindMapping] = {mapping.sdk_kind: mapping for mapping in MAPPINGS}
BY_TREADLE_KIND: dict[str, KindMapping] = {mapping.treadle_kind: mapping for mapping in MAPPINGS}


def sdk_kind_of(event: EventBase) -> str:
    """The SDK kind ``event`` is written as (a foreign event keeps the kind it came with)."""
    if isinstance(event, ForeignEvent):
        return event.foreign_kind
    return BY_TREADLE_KIND[event.kind].sdk_kind
