"""Append planning, the rules both backends apply under their append lock: APPEND-DUP-ID and
APPEND-NO-PARENT checks, TREE-PARENT resolution, the chain segment ("branch") of each new event
and the head move. Backends only fetch what a plan needs and write what it says.

What needs no stored state (each event's stored JSON and time key, the ids to look up, the new
head, the usage added) is ``prepare_append``'s, done before the append lock is asked for: with
group commit (store/group_commit.py) one thread runs the locked part of many appends, so work
done there is serialised, while work done before it overlaps the others' commits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from treadle.errors import AppendError
from treadle.events.model import ROOT, Event
from treadle.store.payloads import stored_payload
from treadle.store.status_columns import status_params
from treadle.store.time_keys import time_us
from treadle.store.usage_totals import batch_usage


@dataclass(frozen=True, slots=True)
class PlannedEvent:
    """One event of an accepted append, ready to write: its seq, resolved parent and payload."""

    seq: int
    event: Event
    parent_seq: int | None
    """Seq of the parent after TREE-PARENT resolution; None for a root."""
    payload: str
    """``stored_payload(event)``, stored verbatim."""
    time_us: int
    """The event's timestamp as microseconds since the epoch, the key of time filters."""


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """The part of an append that reads nothing stored, made on the caller's thread."""

    events: list[Event]
    encoded: list[tuple[str, int]]
    """(``stored_payload(event)``, ``time_us(event.time)``) of each event."""
    wanted: set[str]
    """``ids_to_look_up(events)``."""
    new_head: str | None
    """The head after the append; None when the append leaves it where it is."""
    usage: tuple[int, int, float]
    """What the append adds to its conversation's usage totals."""
    status: tuple[str | None, str | None, str | None]
    """``status_params(events)``: the last status the append records, if any."""


def prepare_append(events: list[Event], *, move_head: bool) -> PreparedAppend:
    """Everything of an append that needs no stored state; raises JsonLimitError (nothing
    appended) for an event the store could not read back."""
    return PreparedAppend(
        events,
        [(stored_payload(event), time_us(event.time)) for event in events],
        ids_to_look_up(events),
        moved_head(events, None, move_head=move_head),
        batch_usage(events),
        status_params(events),
    )


def ids_to_look_up(events: Sequence[Event]) -> set[str]:
    """Ids whose stored seq an append needs: the new ids (APPEND-DUP-ID) and explicit parents."""
    wanted = {event.id for event in events}
    wanted.update(e.parent_id for e in events if e.parent_id is not None and e.parent_id != ROOT)
    return wanted


def plan_append(
    conversation_id: str,
    events: Sequence[Event],
    *,
    next_seq: int,
    stored: Mapping[str, int],
    encoded: Sequence[tuple[str, int]] | None = None,
) -> list[PlannedEvent]:
    """Check an append (APPEND-DUP-ID, APPEND-NO-PARENT) and resolve parents (TREE-PARENT).

    ``stored`` maps the ids of ``ids_to_look_up(events)`` that are already in the conversation to
    their seq, read under the append lock; ``next_seq`` is the conversation's event count. The
    batch is checked as if its events were appended one by one, and refused whole.
    ``encoded``: ``PreparedAppend.encoded``, when made beforehand (else encoded here).
    """
    batch: dict[str, int] = {}
    planned: list[PlannedEvent] = []
    for offset, event in enumerate(events):
        seq = next_seq + offset
        if event.id in stored or event.id in batch:
            raise AppendError(
                "APPEND-DUP-ID",
                f"event id {event.id!r} is already in conversation {conversation_id!r}; "
                "give the new event a fresh id (nothing was appended)",
                event_ids=[event.id],
            )
        parent = event.parent_id
        if parent is None:
            parent_seq = seq - 1 if seq > 0 else None  # legacy: the event appended just before
        elif parent == ROOT:
            parent_seq = None
        else:
            found = batch.get(parent, stored.get(parent))
            if found is None:
                raise AppendError(
                    "APPEND-NO-PARENT",
                    f"event {event.id!r} names parent {parent!r}, which is not in conversation "
                    f"{conversation_id!r}; append the parent first or use {ROOT!r} for a new "
                    "root (nothing was appended)",
                    event_ids=[event.id, parent],
                )
            parent_seq = found
        batch[event.id] = seq
        if encoded is None:
            payload, moment = stored_payload(event), time_us(event.time)
        else:
            payload, moment = encoded[offset]
        planned.append(PlannedEvent(seq, event, parent_seq, payload, moment))
    return planned


def assign_branches(
    planned: Sequence[PlannedEvent],
    *,
    branch_of: Mapping[int, int],
    tip_of: Callable[[int], int],
) -> list[int]:
    """The chain segment ("branch": the seq of its first event) of each planned event.

    An event continues its parent's segment when the parent is that segment's last event (its
    tip); a root, or a child of an event that already has one there, starts a segment at its
    own seq. A path is then a few (branch, seq range) segments, one per fork on it, each an
    index range scan. ``branch_of`` maps the seqs of the stored parents and of the last stored
    event to their branch; ``tip_of(branch)`` is the highest stored seq of a branch.
    """
    known = dict(branch_of)
    tips: dict[int, int] = {}
    branches: list[int] = []
    for item in planned:
        seq, parent = item.seq, item.parent_seq
        if parent is None:
            branch = seq
        else:
            branch = known[parent]
            # the event appended just before is the newest of all, so its segment's tip
            if parent != seq - 1:
                tip = tips[branch] if branch in tips else tip_of(branch)
                if tip != parent:
                    branch = seq  # the parent already has a child on its segment: a fork
        known[seq] = branch
        tips[branch] = seq
        branches.append(branch)
    return branches


def moved_head(events: Sequence[Event], head_id: str | None, *, move_head: bool) -> str | None:
    """The head after appending ``events``: the last one that is not a state change."""
    if move_head:
        for event in reversed(events):
            if event.kind != "state_change":
                return event.id
    return head_id
