"""The transcript as the wire (and the Python API) types it: one ``TranscriptItem`` per model
response (its calls, each with its result or state) or per shown event, a page of them
(``GET .../transcript``), and the live updates a stream frame carries (docs/stream.md). The
core makes them (``events.view``: ``transcript`` for a path, ``TranscriptFollower`` live);
here they are only typed."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_serializer

from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    EventBase,
    ForeignEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
    SystemPromptEvent,
    UserRejectionEvent,
    event_to_dict,
)

CallState = Literal["done", "rejected", "errored", "pending", "waiting", "running", "interrupted"]
"""A call's state: answered by an observation (done), a user rejection, an agent error; not
answered yet while the run waits for a confirmation (waiting), while it runs (running), or
neither (pending); or not answered though the conversation went on without it (interrupted).
Waiting and running come from the conversation's status: the server decides them."""

ResultEvent = ObservationEvent | AgentErrorEvent | UserRejectionEvent


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class EventEntry(_Frozen):
    """One event with its seq (None when the transcript was made without seqs)."""

    seq: int | None
    event: Any

    @field_serializer("event")
    def _event_json(self, event: Any) -> Any:
        # the event's JSON as the store holds it (no nulls): the Canvas reads it so
        return event_to_dict(event) if isinstance(event, EventBase) else event


class ActionEntry(EventEntry):
    event: ActionEvent


class ResultEntry(EventEntry):
    event: ResultEvent = Field(discriminator="kind")


class Call(_Frozen):
    """One call of a response: its action, the result that answers it (LINK) and its state."""

    action: ActionEntry
    result: ResultEntry | None = None
    state: CallState


class _Item(_Frozen):
    event_id: str = Field(description="the id of the item's first event (the item's key)")
    parent_id: str | None = Field(description="the resolved parent of that event (TREE-PARENT)")
    seq: int | None
    folded_by: str | None = Field(
        default=None,
        description="the condensation on the path that took every event of this item out of "
        "the model's context (None: still in it)",
    )


class _SingleItem(_Item):
    @field_serializer("event", check_fields=False)
    def _event_json(self, event: Any) -> Any:
        return event_to_dict(event) if isinstance(event, EventBase) else event


class ResponseItem(_Item):
    """One model response: its calls in order (PROJECT-BATCH), with the response's text."""

    type: Literal["response"] = "response"
    llm_response_id: str
    thought: str | None = None
    reasoning: str | None = None
    calls: list[Call]


class MessageItem(_SingleItem):
    type: Literal["message"] = "message"
    event: MessageEvent


class SystemPromptItem(_SingleItem):
    type: Literal["system_prompt"] = "system_prompt"
    event: SystemPromptEvent


class CondensationItem(_SingleItem):
    type: Literal["condensation"] = "condensation"
    event: CondensationEvent


class StateChangeItem(_SingleItem):
    """A state change worth showing (``events.view.SHOWN_STATE_KEYS``), after its parent's item."""

    type: Literal["state_change"] = "state_change"
    event: StateChangeEvent


class OrphanResultItem(_SingleItem):
    """A result that answers no call on the path."""

    type: Literal["result"] = "result"
    event: ResultEvent = Field(discriminator="kind")


class PauseItem(_SingleItem):
    type: Literal["pause"] = "pause"
    event: PauseEvent


class ForeignItem(_SingleItem):
    type: Literal["foreign"] = "foreign"
    event: ForeignEvent


TranscriptItem = Annotated[
    ResponseItem
    | MessageItem
    | SystemPromptItem
    | CondensationItem
    | StateChangeItem
    | OrphanResultItem
    | PauseItem
    | ForeignItem,
    Field(discriminator="type"),
]
"""One transcript item, told apart by ``type``."""

TRANSCRIPT_ADAPTER: TypeAdapter[list[TranscriptItem]] = TypeAdapter(list[TranscriptItem])


class TranscriptPage(_Frozen):
    """The newest transcript items of the path to ``head`` below a seq cursor (``events.view``
    makes them); ``next_before_seq`` asks for older ones (None: the path's start is reached)."""

    head: str | None
    items: list[TranscriptItem]
    next_before_seq: int | None


class ItemAdded(_Frozen):
    """A new item: for an event continuing a path (its ``parent_id`` is the path's head), the
    path's newest item; a state change is shown after the item showing its ``parent_id`` (and
    the state changes shown there already)."""

    op: Literal["item"] = "item"
    item: TranscriptItem


class CallChanged(_Frozen):
    """Call ``index`` of response ``item`` is now ``call`` (a new call of the response when
    ``index`` is its number of calls; else a result arrived or its state changed)."""

    op: Literal["call"] = "call"
    item: str
    index: int
    call: Call


class ItemsFolded(_Frozen):
    """Condensation ``by`` took the items ``items`` (their keys) out of the model's context."""

    op: Literal["fold"] = "fold"
    by: str
    items: list[str]


TranscriptUpdate = Annotated[ItemAdded | CallChanged | ItemsFolded, Field(discriminator="op")]
"""What one stored event changes in the transcript (an event frame's ``transcript``)."""
