"""Conversation statuses (docs/contracts.md, RUN) and how they are recorded in the log.

A status change is a ``state_change`` event (key ``status``): a side leaf that never moves the
head, so the log itself says what state a conversation was left in, also after a crash.
"""

from __future__ import annotations

from typing import Any

from treadle.data.isolation import ISOLATION_KEY, isolation_view

# What a status event means lives in the API (server and client read it): re-exported here.
from treadle.data.status import HEAD_KEY as HEAD_KEY
from treadle.data.status import STATUS_KEY as STATUS_KEY
from treadle.data.status import ConversationStatus as ConversationStatus
from treadle.data.status import controls_of
from treadle.data.status import status_from_event as status_from_event
from treadle.events.model import Event, StateChangeEvent
from treadle.events.usage import UsageTotals, usage_of
from treadle.events.view import TranscriptFollower
from treadle.store.base import ConversationInfo, EventQuery, EventStore


def status_event(
    status: ConversationStatus, parent_id: str, reason: str | None = None
) -> StateChangeEvent:
    value: dict[str, Any] = {"status": status.value}
    if reason:
        value["reason"] = reason
    return StateChangeEvent(key=STATUS_KEY, value=value, parent_id=parent_id)


def head_move_event(head_id: str) -> StateChangeEvent:
    return StateChangeEvent(key=HEAD_KEY, value={"head": head_id}, parent_id=head_id)


def read_status(
    store: EventStore, conversation_id: str, before_seq: int | None = None
) -> tuple[ConversationStatus, str | None]:
    """The status (and reason) the conversation's log records last (before ``before_seq``,
    when given); IDLE when none. The latest is kept in the conversation's row by the store
    (``store.status_columns``): only an earlier one is searched for."""
    if before_seq is None:
        return recorded_status(store.get_conversation(conversation_id))
    query = EventQuery(
        kinds=["state_change"],
        text='"key":"status"',
        order="desc",
        limit=20,
        before_seq=before_seq,
    )
    for stored in store.search(conversation_id, query).items:
        event = stored.event
        if isinstance(event, StateChangeEvent) and (found := status_from_event(event)):
            return found
    return ConversationStatus.IDLE, None


def recorded_status(info: ConversationInfo) -> tuple[ConversationStatus, str | None]:
    """The status (and reason) a conversation's row says its log records last."""
    if info.status is None:
        return ConversationStatus.IDLE, None
    return ConversationStatus(info.status), info.status_reason


INTERRUPTED_REASON = (
    "interrupted: the process that ran it stopped without ending the run (its run lease "
    "expired); run it again to continue"
)


def as_read(
    status: ConversationStatus, reason: str | None, lease_held: bool | None
) -> tuple[ConversationStatus, str | None]:
    """The status a reader should be told: a log that says RUNNING while nobody holds the run
    lease (``lease_held`` False; None: unknown) was left by a process that died mid-run."""
    if status is ConversationStatus.RUNNING and lease_held is False:
        return status, INTERRUPTED_REASON
    return status, reason


class StreamState:
    """What the stream tells after each stored event, fed the log in seq order: the event's
    resolved parent and the action it answers, what it changes in the transcript
    (``events.view.TranscriptFollower``), the status the log records last (IDLE before
    any), the head (the last event that is not a state change, or an explicit head move), the
    usage totals (``events.usage``: every model call so far, every branch) and, for an
    isolation fact, the isolation view with the count of runs without a sandbox. The hub
    keeps one for live events; a replay seeds its own up to where the client starts, so
    replayed frames equal live ones."""

    __slots__ = ("_follower", "head", "reason", "status", "unsandboxed_runs", "usage")

    def __init__(self) -> None:
        self._follower = TranscriptFollower()
        self.status = ConversationStatus.IDLE
        self.reason: str | None = None
        self.head: str | None = None
        self.usage = UsageTotals()
        self.unsandboxed_runs = 0
        """Isolation facts with sandbox none seen so far (seeded: counted before the window)."""

    def start_from(self, status: ConversationStatus, reason: str | None, head: str | None) -> None:
        """Take the status and head as they stood before the events this state will be fed
        (seeding from a window of the log instead of all of it)."""
        self.status, self.reason, self.head = status, reason, head

    def advance(self, event: Event, seq: int | None = None) -> dict[str, Any]:
        """The facts of the next event's frame: ``parent_id``, ``answers``, ``status``
        (``{status, reason, controls}``), ``head`` and ``usage`` as they are after it,
        ``transcript`` (its updates, JSON-ready), ``isolation`` (an
        isolation fact only) and ``run_finished`` (True for a status change that ends a run)."""
        run_finished = False
        isolation: dict[str, Any] | None = None
        if (usage := usage_of(event)) is not None:
            was = self.usage
            self.usage = UsageTotals(
                was.prompt_tokens + usage.prompt_tokens,
                was.completion_tokens + usage.completion_tokens,
                was.cost_usd + usage.cost_usd,
            )
        if not isinstance(event, StateChangeEvent):
            self.head = event.id
        elif (found := status_from_event(event)) is not None:
            self.status, self.reason = found
            run_finished = self.status is not ConversationStatus.RUNNING
        elif event.key == HEAD_KEY and isinstance(event.value, dict):
            head = event.value.get("head")
            if isinstance(head, str):
                self.head = head
        elif event.key == ISOLATION_KEY and isinstance(event.value, dict):
            self.unsandboxed_runs += event.value.get("sandbox") == "none"
            isolation = isolation_view(event.value, self.unsandboxed_runs).model_dump(mode="json")
        parent_id, answers, updates = self._follower.feed(event, seq, self.status.value)
        facts: dict[str, Any] = {
            "parent_id": parent_id,
            "answers": answers,
            "status": {
                "status": self.status.value,
                "reason": self.reason,
                "controls": controls_of(self.status),
            },
            "head": self.head,
            "usage": usage_view(self.usage),
            "transcript": updates,
            "run_finished": run_finished,
        }
        if isolation is not None:
            facts["isolation"] = isolation
        return facts


COST_DIGITS = 9
"""A frame's cost is rounded to a billionth of a dollar: totals summed in another order (the
store's, a replay's seed) then agree to the last digit shown."""


def usage_view(totals: UsageTotals) -> dict[str, Any]:
    """Usage totals as the stream and the conversation's view show them."""
    return {
        "prompt_tokens": totals.prompt_tokens,
        "completion_tokens": totals.completion_tokens,
        "cost_usd": round(totals.cost_usd, COST_DIGITS),
    }
