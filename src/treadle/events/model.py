"""The event kinds of docs/contracts.md as frozen pydantic models, and their JSON codec.

Every event is immutable (nested JSON values too) and rejects unknown fields; the union
``Event`` is discriminated on ``kind``. ``event_to_json``/``event_from_json`` are the one codec.
A reader requires ``kind``, ``id`` and ``timestamp``; only events made in Python get a fresh id
and the current time.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
)

from treadle.events.facts import FACTS, facts_json_schema
from treadle.events.frozen_json import FrozenDict, freeze
from treadle.events.json_limits import check_json_scalar

ROOT = "__root__"
"""``parent_id`` marker of an explicit new root; distinct from an absent parent (legacy)."""

Source = Literal["user", "agent", "environment", "hook"]

JSONValue = Annotated[Any, AfterValidator(freeze)]
"""Any JSON value, frozen on validation: dicts become read-only, lists become tuples."""

JSONObject = Annotated[dict[str, Any], AfterValidator(freeze)]


def _json_int(value: int) -> int:
    check_json_scalar(value)
    return value


JSONInt = Annotated[int, AfterValidator(_json_int)]
"""An integer a JSON reader can parse back (at most MAX_INT_DIGITS digits)."""


def new_event_id() -> str:
    return str(uuid.uuid4())


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _given_by_init(field: Any) -> Any:
    """Marks a field that ``EventBase.__init__`` fills for events made in Python (id, timestamp).

    Returns ``field`` unchanged, so validation still requires it (a reader invents no identity);
    a type checker, which sees a default that is no ``Field(...)``, lets a Python caller omit it.
    """
    return field


def parse_timestamp(value: str) -> datetime:
    """The moment a timestamp names; a naive one (met on import) is read as UTC."""
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class EventBase(BaseModel):
    """Fields every event has. Subclasses add their own and fix ``kind``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # Required when read (a file, a store, the API): no default factory may invent an identity
    # for an event that lacks one. ``__init__`` below gives events made in Python both.
    id: str = _given_by_init(Field(min_length=1, description="Unique event id"))
    source: Source
    timestamp: str = _given_by_init(
        Field(
            description=(
                "ISO 8601; Treadle writes UTC with an offset, imported values are kept as given"
            ),
        )
    )
    parent_id: str | None = Field(
        default=None,
        description=(
            "An event id; '__root__' for an explicit new root; absent/null (legacy) means "
            "the event appended just before, or a root when first (TREE-PARENT)"
        ),
    )
    extra: JSONObject = Field(
        default_factory=FrozenDict,
        description="Fields met on import that Treadle does not model, kept verbatim",
    )
    # Each subclass narrows it to its own literal with that as default (the union's tag). Declared
    # last, so each subclass's fields keep their order (and the JSON its bytes) as it redeclares it.
    kind: str

    def __init__(self, /, **data: Any) -> None:
        if "id" not in data:
            data["id"] = new_event_id()
        if "timestamp" not in data:
            data["timestamp"] = utc_now_iso()
        super().__init__(**data)

    # pydantic calls an overridden __init__ from every validation (files, stores, the API)
    # unless it is marked as the base one: so marked, only a call in Python comes here.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @field_validator("id")
    @classmethod
    def _id_is_not_root_marker(cls, value: str) -> str:
        if value == ROOT:
            raise ValueError(f"TREE-PARENT: {ROOT!r} is reserved as the root marker, not an id")
        return value

    @field_validator("parent_id")
    @classmethod
    def _parent_is_not_empty(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError(
                "TREE-PARENT: an empty parent_id is neither a root nor an id; "
                f"use {ROOT!r} for a new root or omit it for the legacy rule"
            )
        return value

    @field_validator("timestamp")
    @classmethod
    def _timestamp_is_iso8601(cls, value: str) -> str:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"timestamp {value!r} is not ISO 8601") from None
        return value

    @property
    def time(self) -> datetime:
        return parse_timestamp(self.timestamp)


def _empty(value: tuple[str, ...]) -> bool:
    return not value


class TokenUsage(BaseModel):
    """What one model call cost, recorded on the events it produced."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str | None = None
    prompt_tokens: JSONInt = Field(default=0, ge=0)
    completion_tokens: JSONInt = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0)


class MessageEvent(EventBase):
    """User or agent text. An agent message is a model response without calls."""

    kind: Literal["message"] = "message"
    role: Literal["user", "assistant"] = Field(
        # None only until model_post_init fills it from source; the schema keeps the null default
        default=None,  # type: ignore[arg-type]
        description="Chat role; defaults to 'assistant' for source agent, else 'user'",
    )
    text: str = ""
    image_urls: tuple[str, ...] = ()
    llm_response_id: str | None = None
    reasoning: str | None = None
    usage: TokenUsage | None = None
    # Written only when set: most messages have none, and a log's bytes should not grow for it.
    activated_skills: tuple[str, ...] = Field(
        default=(),
        exclude_if=_empty,
        description="Names of the workspace skills whose trigger words this user message "
        "mentions, added to it once per branch (docs/skills.md; the SDK's field)",
    )
    extended_content: tuple[str, ...] = Field(
        default=(),
        exclude_if=_empty,
        description="Text the runtime added to the message, sent after its own text: each "
        "activated skill's content (the SDK's field)",
    )

    def model_post_init(self, _context: Any) -> None:
        if self.role is None:
            object.__setattr__(self, "role", "assistant" if self.source == "agent" else "user")


class SystemPromptEvent(EventBase):
    """The system prompt and the tool schemas offered to the model."""

    kind: Literal["system_prompt"] = "system_prompt"
    source: Source = "agent"
    text: str
    tools: tuple[JSONObject, ...] = ()
    context: str | None = Field(
        default=None,
        description="The workspace's instructions (AGENTS.md, always-on skills) as loaded when "
        "the conversation started, sent after `text` in the same system message (the SDK's "
        "dynamic_context)",
    )
    skills: tuple[str, ...] = Field(
        default=(),
        exclude_if=_empty,
        description="Names of the always-on skills `context` holds (Treadle's)",
    )


class ActionEvent(EventBase):
    """One tool call the model proposed. Calls of one response share ``llm_response_id``;
    the shared text (thought, reasoning) is on the first action of the response only."""

    kind: Literal["action"] = "action"
    source: Source = "agent"
    llm_response_id: str = Field(min_length=1)
    tool_call_id: str = Field(min_length=1)
    tool_name: str
    arguments: JSONObject | None = Field(
        default=None, description="Parsed JSON object, or null when the model sent unparseable text"
    )
    raw_arguments: str = Field(description="The arguments string exactly as the model sent it")
    thought: str = ""
    reasoning: str | None = None
    security_risk: Literal["unknown", "low", "medium", "high"] | None = None
    usage: TokenUsage | None = None

    @property
    def has_shared_text(self) -> bool:
        return bool(self.thought) or bool(self.reasoning)


class ObservationEvent(EventBase):
    """A tool's final result for one call, linked by (action_id, tool_call_id, tool_name)."""

    kind: Literal["observation"] = "observation"
    source: Source = "environment"
    action_id: str
    tool_call_id: str
    tool_name: str
    content: str = ""
    image_urls: tuple[str, ...] = ()
    is_error: bool = False
    data: JSONObject = Field(
        default_factory=FrozenDict, description="Structured tool output (exit code, paths, ...)"
    )


class AgentErrorEvent(EventBase):
    """A bad tool call, a tool's ValueError, or a call closed by an interrupt or a restart
    (``interrupted``); answers its call by ``tool_call_id`` (the tool name may not exist, the
    action may have no arguments)."""

    kind: Literal["agent_error"] = "agent_error"
    source: Source = "agent"
    tool_call_id: str
    tool_name: str
    action_id: str | None = None
    error: str
    interrupted: Literal["user", "crash"] | None = Field(
        default=None,
        description="Set when the call was closed without running to its end: `user` (the "
        "user interrupted the run) or `crash` (the process that ran it stopped; closed when "
        "the conversation was run again)",
    )


class UserRejectionEvent(EventBase):
    """A call the user (or a hook) refused in confirmation mode; answers it like a result."""

    kind: Literal["user_rejection"] = "user_rejection"
    source: Source = "user"
    action_id: str
    tool_call_id: str
    tool_name: str
    reason: str = "User rejected the action"
    rejected_by: Literal["user", "hook"] = "user"


CondensationTrigger = Literal["budget", "refusal"]


class CondensationEvent(EventBase):
    """Makes ``forgotten_event_ids`` leave the model's context; the summary (if any) stands at
    ``summary_offset`` among the events that remain (SDK semantics)."""

    kind: Literal["condensation"] = "condensation"
    source: Source = "environment"
    forgotten_event_ids: tuple[str, ...] = ()
    summary: str | None = None
    summary_offset: JSONInt | None = Field(default=None, ge=0)
    llm_response_id: str | None = None
    usage: TokenUsage | None = Field(
        default=None, description="What the model call that wrote the summary cost (Treadle's)"
    )
    note: str | None = Field(
        default=None,
        description="Why the condensation is as it is, e.g. no summary because the summary "
        "call failed (Treadle's)",
    )
    trigger: CondensationTrigger | None = Field(
        default=None,
        description="What made it: budget (the next request would pass the token budget) or "
        "refusal (the provider refused the request as too long); absent in logs written "
        "before Treadle recorded it (Treadle's)",
    )


class PauseEvent(EventBase):
    """The user paused the run. Not model-visible."""

    kind: Literal["pause"] = "pause"
    source: Source = "user"


class StateChangeEvent(EventBase):
    """A change of conversation state (status, settings). Not model-visible, never a head."""

    kind: Literal["state_change"] = "state_change"
    source: Source = "environment"
    key: str = Field(
        description="What changed: one of the facts Treadle records, "
        + ", ".join(f"`{key}`" for key in FACTS)
        + " (the shape of each one's value: `facts` in `treadle schema`; docs/contracts.md, "
        "Recorded facts). "
        "Other keys (a log from elsewhere) are kept as they are"
    )
    value: JSONValue = Field(
        default=None, description="The change; its shape is its key's (events/facts.py)"
    )


class ForeignEvent(EventBase):
    """An event of a kind Treadle does not know, kept with its original JSON for export."""

    kind: Literal["foreign"] = "foreign"
    foreign_kind: str = Field(
        description="The kind (or class name) the event had where it came from"
    )
    payload: JSONObject = Field(
        default_factory=FrozenDict, description="The original event's fields not modelled above"
    )


Event = Annotated[
    MessageEvent
    | SystemPromptEvent
    | ActionEvent
    | ObservationEvent
    | AgentErrorEvent
    | UserRejectionEvent
    | CondensationEvent
    | PauseEvent
    | StateChangeEvent
    | ForeignEvent,
    Field(discriminator="kind"),
]

EVENT_CLASSES: dict[str, type[Event]] = {
    cls.model_fields["kind"].default: cls
    for cls in (
        MessageEvent,
        SystemPromptEvent,
        ActionEvent,
        ObservationEvent,
        AgentErrorEvent,
        UserRejectionEvent,
        CondensationEvent,
        PauseEvent,
        StateChangeEvent,
        ForeignEvent,
    )
}
EVENT_KINDS: tuple[str, ...] = tuple(EVENT_CLASSES)

FinalResult = ObservationEvent | AgentErrorEvent | UserRejectionEvent
"""The results that close a call (LINK-ONCE counts these)."""

RESULT_KINDS = frozenset({"observation", "agent_error", "user_rejection"})
MODEL_VISIBLE_KINDS = frozenset(
    {"message", "system_prompt", "action", "observation", "agent_error", "user_rejection"}
)
"""Kinds the projection turns into messages (condensation acts on them, it is not one)."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENT_LIST_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])


def event_to_json(event: EventBase) -> str:
    """Compact JSON of one event; ``event_from_json`` reads it back to an equal event."""
    return event.model_dump_json(exclude_none=True)


def event_to_dict(event: EventBase) -> dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=True)


def event_from_json(text: str | bytes) -> Event:
    return EVENT_ADAPTER.validate_json(text)


def event_from_dict(data: dict[str, Any]) -> Event:
    return EVENT_ADAPTER.validate_python(data)


def events_json_schema() -> dict[str, Any]:
    """JSON Schema of every event kind: the reference of Treadle's file format."""
    schema = EVENT_ADAPTER.json_schema()
    schema["title"] = "Treadle event"
    schema["description"] = (
        "One event of a Treadle log (JSON Lines: one per line). See docs/contracts.md for the contracts."
    )
    # The reader finds the kind by its tag, so an event without "kind" is refused even though
    # each class has a default for it: required, as "id" and "timestamp" are.
    for kind, cls in EVENT_CLASSES.items():
        definition = schema["$defs"][cls.__name__]
        assert definition["properties"]["kind"]["const"] == kind
        definition["required"] = ["kind", *definition.get("required", [])]
    schema["facts"] = facts_json_schema()  # each state_change key's value (not a keyword)
    return schema
