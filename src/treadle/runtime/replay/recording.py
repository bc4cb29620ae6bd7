"""What a replay is fed: a stored conversation's path to a head, read once into the recorded
model responses, tool results, user inputs and confirmation decisions (docs/replay.md).

Nothing here writes: the recording is read from the store and kept in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from treadle.data.isolation import ISOLATION_KEY
from treadle.data.settings import ConversationSettings, SandboxSettings
from treadle.errors import TreadleError
from treadle.events.fact_keys import BUDGET_KEY as BUDGET_KEY
from treadle.events.fact_keys import CALL_IDS_KEY as CALL_IDS_KEY
from treadle.events.fact_keys import CONTEXT_LIMIT_KEY as CONTEXT_LIMIT_KEY
from treadle.events.fact_keys import HEAD_KEY
from treadle.events.fact_keys import MODEL_ERROR_KEY as MODEL_ERROR_KEY
from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
    UserRejectionEvent,
)
from treadle.runtime.llm.base import ModelResponse, ToolCall
from treadle.runtime.snapshots.facts import (
    BEFORE_RESTORE,
    SnapshotFact,
    covering,
    facts,
    snapshot_facts,
)
from treadle.store.base import EventStore

BUDGET_NAMES = ("max_cost_usd", "max_total_tokens")
"""The budgets a ``budget`` fact may raise (``runtime.budget.Budget``'s fields)."""
REFUSAL_NOTE = "the provider refused the request"
"""How the note of a condensation made after a context-window refusal starts: read only in logs
stored before condensations recorded their ``trigger``."""

Result = ObservationEvent | AgentErrorEvent | UserRejectionEvent


class ReplayInputError(TreadleError):
    """The replay cannot start: an unknown conversation or event, or nothing to replay with
    (no settings, no starting files). The CLI exits 2 with this message."""


@dataclass(frozen=True, slots=True)
class Input:
    """One thing the driver does to the replayed conversation, in the recorded order:
    ``send`` a user message, ``pause`` as the user did, ``raise_budget`` to the recorded
    ``budgets`` (name: new value), ``step`` (one run of one model call and its
    consequences, or of a pause on the budget; the calls it proposes are confirmed or
    rejected as recorded), or ``hold`` (the head moved back into the batch just made, to its
    ``count``-th event: calls of it the recording never answered are left open, as the
    user's head move left them).

    ``at`` is where on the path the input takes effect: the recorded answers to calls that
    stand before it are given before it, the others after (a call left waiting by a stop,
    confirmed only after the pause that came first)."""

    kind: Literal["send", "pause", "raise_budget", "step", "hold"]
    at: int
    text: str = ""
    budgets: dict[str, Any] = field(default_factory=dict)
    count: int = 0


@dataclass
class Recording:
    """A conversation's path root..``head`` and what a replay of it is fed."""

    conversation_id: str
    head: str
    settings: ConversationSettings
    metadata: dict[str, Any]
    path: list[Event]
    responses: list[ModelResponse] = field(default_factory=list)
    """The model's responses in path order (k calls each, or a text)."""
    summaries: list[CondensationEvent] = field(default_factory=list)
    """The condensations in path order: their summaries answer the summary calls."""
    refused_before: set[int] = field(default_factory=set)
    """Indexes of responses asked after a provider refused the request as too long."""
    refusal_limits: dict[int, int] = field(default_factory=dict)
    """The window each of those refusals stated (``context_limit`` facts from the provider)."""
    failed_before: dict[int, list[dict[str, str]]] = field(default_factory=dict)
    """Indexes of responses asked after model calls that failed (``model_error`` facts:
    ``{error, raw_response}``, in order), each failing again once in the replay."""
    results: dict[str, Result] = field(default_factory=dict)
    """The recorded result of each call, by tool call id (unique on a path: LINK-UNIQUE)."""
    inputs: list[Input] = field(default_factory=list)
    isolation: dict[str, Any] | None = None
    """The last recorded ``isolation`` fact (what the tools ran under), if any."""
    snapshots: list[SnapshotFact] = field(default_factory=list)
    """The snapshots taken after events of the path, in the order they were taken."""

    def __post_init__(self) -> None:
        self._positions = {event.id: index for index, event in enumerate(self.path)}

    def result_position(self, tool_call_id: str) -> int:
        """Where the call's recorded result stands on the path (a large number: none)."""
        result = self.results.get(tool_call_id)
        return self._positions.get(result.id, len(self.path)) if result else len(self.path)

    @property
    def first_snapshot(self) -> SnapshotFact | None:
        """The files the conversation started from: the snapshot after its first event."""
        if not self.path:
            return None
        first = self.path[0].id
        return next((fact for fact in self.snapshots if fact.after_event == first), None)

    @property
    def last_snapshot(self) -> SnapshotFact | None:
        """The files at the head: the snapshot covering it, else (a tool ran since) the last
        one taken on the path."""
        found = covering(self.path, self.snapshots)
        return found or (self.snapshots[-1] if self.snapshots else None)

    def sandbox(self) -> SandboxSettings:
        """What the tools ran under last: the ``isolation`` fact when there is one (it names
        an override such as ``--sandbox none``), else the stored settings' sandbox."""
        fact = self.isolation
        if not fact:
            return self.settings.sandbox
        if fact.get("sandbox") == "none":
            return SandboxSettings(kind="none")
        if self.settings.sandbox.kind == "bubblewrap":
            return self.settings.sandbox
        try:  # sandboxed although the settings say none (they were changed since)
            return SandboxSettings(
                kind="bubblewrap",
                network=fact.get("network", "off"),
                mounts_ro=tuple(fact.get("mounts_ro") or ()),
                limits=fact.get("limits") or self.settings.sandbox.limits,
            )
        except ValidationError:  # a fact from elsewhere: the settings say it then
            return self.settings.sandbox


def read_recording(store: EventStore, conversation_id: str, head: str | None) -> Recording:
    """The recording of ``conversation_id`` up to ``head`` (default: its head);
    ``ReplayInputError`` for an unknown conversation or event, or one without settings."""
    try:
        info = store.get_conversation(conversation_id)
        head = head or store.head(conversation_id)
        if head is None:
            raise ReplayInputError(f"conversation {conversation_id!r} has no events to replay")
        stored = store.get_event(conversation_id, head)
        if isinstance(stored.event, StateChangeEvent):
            raise ReplayInputError(
                f"event {head!r} is a state change (a fact beside the path): give an event of "
                "the conversation's tree (treadle path lists them)"
            )
        path = store.path_to_root(conversation_id, head)
        settings = ConversationSettings.from_metadata(info.metadata)
    except ValidationError as error:
        raise ReplayInputError(
            f"conversation {conversation_id!r} has settings this version cannot read: {error}"
        ) from None
    except ReplayInputError:
        raise
    except TreadleError as error:  # ConversationNotFound, EventNotFound
        raise ReplayInputError(str(error)) from None
    if settings is None:
        raise ReplayInputError(
            f"conversation {conversation_id!r} has no runtime settings (was it imported?): "
            "a replay runs the runtime with the settings it ran with"
        )
    recording = Recording(conversation_id, head, settings, dict(info.metadata), list(path))
    on_path = {event.id for event in path}
    # A snapshot a restore took first holds the files of whatever branch was on disk then.
    recording.snapshots = [
        fact
        for fact in snapshot_facts(store, conversation_id)
        if fact.after_event in on_path and fact.value.get("reason") != BEFORE_RESTORE
    ]
    isolation = facts(store, conversation_id, ISOLATION_KEY)
    if isolation and isinstance(isolation[-1][1].value, dict):
        recording.isolation = dict(isolation[-1][1].value)
    raises = _dict_facts(store, conversation_id, BUDGET_KEY)
    recording.settings = _budgets_before_raises(settings, [event for _seq, event in raises])
    # Replayed where they were made, in the order they were made.
    replayed = sorted(raises + _dict_facts(store, conversation_id, MODEL_ERROR_KEY))
    _read_path(
        recording,
        _renamed_originals(store, conversation_id),
        [event for _seq, event in replayed],
        # Where the user moved the head (``Conversation.switch_branch`` records each move),
        # and the head the replay goes to.
        {head, *(str(event.parent_id) for _seq, event in facts(store, conversation_id, HEAD_KEY))},
    )
    # The k-th refusal on the path learned the k-th limit recorded on it.
    limits = [
        event.value
        for _seq, event in _dict_facts(store, conversation_id, CONTEXT_LIMIT_KEY)
        if event.parent_id in on_path
    ]
    for number, value in zip(sorted(recording.refused_before), limits, strict=False):
        if value.get("source") == "provider" and isinstance(value.get("tokens"), int):
            recording.refusal_limits[number] = value["tokens"]
    return recording


def _dict_facts(
    store: EventStore, conversation_id: str, key: str
) -> list[tuple[int, StateChangeEvent]]:
    """The ``key`` facts whose value is an object (one from elsewhere may be anything)."""
    return [
        (seq, event)
        for seq, event in facts(store, conversation_id, key)
        if isinstance(event.value, dict)
    ]


def _budgets_before_raises(
    settings: ConversationSettings, raises: Sequence[StateChangeEvent]
) -> ConversationSettings:
    """``settings`` (stored: the budgets as last raised) with each raised budget as it was
    before its first raise: the replay starts from it and raises it where the user did."""
    before: dict[str, Any] = {}
    for event in raises:
        for name, change in event.value.items():
            if name in BUDGET_NAMES and isinstance(change, dict):
                before.setdefault(name, change.get("from"))
    return settings.model_copy(update=before) if before else settings


def _renamed_originals(store: EventStore, conversation_id: str) -> dict[str, str]:
    """action id -> the call id the model sent, for calls the runtime renamed: the replay
    sends the original so that the runtime renames it again."""
    originals: dict[str, str] = {}
    for _seq, event in facts(store, conversation_id, CALL_IDS_KEY):
        value = event.value if isinstance(event.value, dict) else {}
        for item in value.get("renamed") or ():
            if isinstance(item, dict) and "action_id" in item and "original" in item:
                originals[str(item["action_id"])] = str(item["original"])
    return originals


def _read_path(
    recording: Recording,
    originals: dict[str, str],
    replayed: Sequence[StateChangeEvent],
    moved_to: set[str],
) -> None:
    """Read ``recording.path`` into its inputs, responses and results; the ``replayed``
    facts (budget raises, model errors) where the head was when they were made; a ``hold``
    where the head was moved (``moved_to``) to the end of what the path holds of a batch."""
    path = recording.path
    facts_after: dict[str, list[StateChangeEvent]] = {}
    for fact in replayed:  # one made on another branch is not on this path: not replayed
        if fact.parent_id is not None:
            facts_after.setdefault(fact.parent_id, []).append(fact)
    index = 0
    while index < len(path):
        event = path[index]
        if isinstance(event, ActionEvent):
            batch = _batch_at(path, index)
            recording.inputs.append(Input("step", index))
            recording.responses.append(_response_of(batch, originals))
            span = _batch_span(path, index, batch)
            if path[index + span - 1].id in moved_to:
                # The user moved the head back into this batch, or onto its last answer: the
                # replay, which runs a batch whole (and pauses after a stop), moves its head
                # back there too (a no-op when nothing of its own came after).
                recording.inputs.append(Input("hold", index + span, count=span))
            index += len(batch)
            _facts_after(recording, batch, facts_after, index + len(batch))
            continue
        if isinstance(event, MessageEvent):
            if event.source == "agent":
                recording.inputs.append(Input("step", index))
                recording.responses.append(
                    ModelResponse(
                        id=event.llm_response_id or "",
                        text=event.text,
                        reasoning=event.reasoning,
                        usage=event.usage or ModelResponse("").usage,
                    )
                )
            elif event.source != "hook":  # a hook's message is the hooks' to give again
                recording.inputs.append(Input("send", index, event.text))
        elif isinstance(event, PauseEvent) and event.source == "user":
            if not _ends_an_interrupt(path, index):  # that pause is the run's: replayed with it
                recording.inputs.append(Input("pause", index))
        elif isinstance(event, PauseEvent) and event.source == "environment":
            recording.inputs.append(Input("step", index))  # a run that paused on its budget
        elif isinstance(event, CondensationEvent):
            if _made_by_refusal(event):
                recording.refused_before.add(len(recording.responses))
            recording.summaries.append(event)
        elif isinstance(event, ObservationEvent | AgentErrorEvent | UserRejectionEvent):
            recording.results.setdefault(event.tool_call_id, event)
        _facts_after(recording, [event], facts_after, index + 1)
        index += 1


def _facts_after(
    recording: Recording,
    events: Sequence[Event],
    facts_after: dict[str, list[StateChangeEvent]],
    at: int,
) -> None:
    """The facts made when the head was one of ``events``, as inputs taking effect at ``at``
    (the path's position after them): a budget raised, a model call that failed (a run of
    its own, its call failing again)."""
    for event in events:
        for fact in facts_after.get(event.id, ()):
            if fact.key == MODEL_ERROR_KEY:
                failure = {
                    "error": str(fact.value.get("error", "")),
                    "raw_response": str(fact.value.get("raw_response", "")),
                }
                recording.failed_before.setdefault(len(recording.responses), []).append(failure)
                recording.inputs.append(Input("step", at))
                continue
            budgets = {
                name: change["to"]
                for name, change in fact.value.items()
                if name in BUDGET_NAMES and isinstance(change, dict) and "to" in change
            }
            recording.inputs.append(Input("raise_budget", at, budgets=budgets))


def _ends_an_interrupt(path: Sequence[Event], index: int) -> bool:
    """Whether the pause at ``index`` is the one an interrupted run recorded as it stopped
    (right after the calls it closed as interrupted by the user)."""
    before = path[index - 1] if index else None
    return isinstance(before, AgentErrorEvent) and before.interrupted == "user"


def _batch_span(path: Sequence[Event], start: int, batch: Sequence[ActionEvent]) -> int:
    """How many events of the path from ``start`` are ``batch``'s: its actions, then the
    answers to its calls that follow them."""
    calls = {action.tool_call_id for action in batch}
    end = start + len(batch)
    while end < len(path) and getattr(path[end], "tool_call_id", None) in calls:
        if isinstance(path[end], ActionEvent):
            break
        end += 1
    return end - start


def _batch_at(path: Sequence[Event], start: int) -> list[ActionEvent]:
    """The actions of one response from ``start`` (PROJECT-BATCH: consecutive actions with
    the same response id)."""
    first = path[start]
    assert isinstance(first, ActionEvent)
    batch = [first]
    for event in path[start + 1 :]:
        if not isinstance(event, ActionEvent) or event.llm_response_id != first.llm_response_id:
            break
        batch.append(event)
    return batch


def _response_of(batch: Sequence[ActionEvent], originals: dict[str, str]) -> ModelResponse:
    """The model response that made ``batch``, as the model sent it (original call ids)."""
    first = batch[0]
    return ModelResponse(
        id=first.llm_response_id,
        text=first.thought,
        reasoning=first.reasoning,
        tool_calls=tuple(
            ToolCall(
                id=originals.get(action.id, action.tool_call_id),
                name=action.tool_name,
                arguments=action.raw_arguments,
            )
            for action in batch
        ),
        usage=first.usage or ModelResponse("").usage,
    )


def _made_by_refusal(condensation: CondensationEvent) -> bool:
    """Whether a context-window refusal made ``condensation`` (the replay refuses there too)."""
    if condensation.trigger is not None:
        return condensation.trigger == "refusal"
    return (condensation.note or "").startswith(REFUSAL_NOTE)  # stored before ``trigger``
