"""Backend-neutral rules every store backend applies the same way: APPEND checks, TREE-PARENT
resolution, head moves, time keys, query validation and paging. Backends only fetch and write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from treadle.api.ids import CONVERSATION_ID_MAX as CONVERSATION_ID_MAX  # its old home
from treadle.api.ids import conversation_id_problem
from treadle.errors import AppendError
from treadle.events.audit_facts import AuditFacts
from treadle.events.branches import NO_BASE, BranchSummary, Line, Node, summarize
from treadle.events.json_limits import JsonLimitError, check_json_depth, check_json_value
from treadle.events.model import ROOT, Event, event_from_json, event_to_json, parse_timestamp
from treadle.store.base import ConversationInfo, EventPage, EventQuery, StoredEvent, StoreError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class InvalidConversationId(StoreError, ValueError):
    """A conversation id that breaks ``treadle.api.ids.CONVERSATION_ID_RULE`` (bad input, 422)."""


def check_conversation_id(conversation_id: str) -> str:
    """``conversation_id`` if it follows ``CONVERSATION_ID_RULE``, else InvalidConversationId."""
    problem = conversation_id_problem(conversation_id)
    if problem is not None:
        raise InvalidConversationId(problem)
    return conversation_id


def check_text(name: str, value: str | None) -> None:
    """Refuse text no store can encode (a lone surrogate, from JSON's "\\ud800"), naming it."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise StoreError(
                f"{name} holds a lone surrogate U+{ord(value[error.start]):04X} at position "
                f"{error.start}, which is not text: send valid UTF-8"
            ) from None


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


def ids_to_look_up(events: Sequence[Event]) -> set[str]:
    """Ids whose stored seq an append needs: the new ids (APPEND-DUP-ID) and explicit parents."""
    wanted = {event.id for event in events}
    wanted.update(e.parent_id for e in events if e.parent_id is not None and e.parent_id != ROOT)
    return wanted


def plan_append(
    conversation_id: str, events: Sequence[Event], *, next_seq: int, stored: Mapping[str, int]
) -> list[PlannedEvent]:
    """Check an append (APPEND-DUP-ID, APPEND-NO-PARENT) and resolve parents (TREE-PARENT).

    ``stored`` maps the ids of ``ids_to_look_up(events)`` that are already in the conversation to
    their seq, read under the append lock; ``next_seq`` is the conversation's event count. The
    batch is checked as if its events were appended one by one, and refused whole.
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
        planned.append(
            PlannedEvent(seq, event, parent_seq, stored_payload(event), time_us(event.time))
        )
    return planned


def stored_payload(event: Event) -> str:
    """``event_to_json(event)``, refused (JsonLimitError, nothing appended) when the store's
    reader could not read it back: a lone surrogate in its text, or nesting deeper than
    MAX_JSON_DEPTH. (Numbers were checked when the event was made.)"""
    try:
        payload = event_to_json(event)
    except PydanticSerializationError:  # a lone surrogate in a string
        raise _unstorable(event, None) from None
    try:
        check_json_depth(payload)
        if "\ufffd" in payload:
            # pydantic writes a lone surrogate in a dict key as U+FFFD: it would read back
            # changed. Rare enough (replaced bytes) to check the event whole then.
            check_json_value(event.model_dump(mode="python"))
    except JsonLimitError as error:
        raise _unstorable(event, error) from None
    return payload


def _unstorable(event: Event, error: JsonLimitError | None) -> JsonLimitError:
    """The error for an event the store cannot hold, naming its field when it can be found."""
    if error is None:
        try:
            check_json_value(event.model_dump(mode="python"))
        except JsonLimitError as found:
            error = found
    field = error.field if error is not None else None
    problem = error.message if error is not None else "it cannot be written as JSON"
    return JsonLimitError(
        f"event {event.id!r} cannot be stored: {problem} (nothing was appended)", field=field
    )


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


def time_us(moment: datetime) -> int:
    """Microseconds since the epoch, exact (a float would blur the filters' bounds); naive = UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND


def timestamp_us(timestamp: str) -> int:
    return time_us(parse_timestamp(timestamp))


def check_query(query: EventQuery) -> None:
    """Refuse a query no backend can answer, with what to change."""
    if query.limit < 0:
        raise ValueError(f"EventQuery.limit must be >= 0, got {query.limit}")
    if query.order not in ("asc", "desc"):
        raise ValueError(f"EventQuery.order must be 'asc' or 'desc', got {query.order!r}")


def page_of(rows: Sequence[StoredEvent], limit: int) -> EventPage:
    """A page from up to ``limit + 1`` rows fetched in page order: the extra row only says that
    there is a next page, so ``next_cursor`` is None exactly at the end."""
    items = list(rows[:limit])
    more = len(rows) > limit and bool(items)
    return EventPage(items=items, next_cursor=items[-1].seq if more else None)


def metadata_json(metadata: Mapping[str, Any] | None) -> str:
    """The conversation metadata as JSON text, refusing what is not a JSON object."""
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping):
        raise TypeError(f"conversation metadata must be a JSON object, got {type(metadata)}")
    try:
        # NaN, a lone surrogate (which dumps fine but no store can encode), too deep, ...
        check_json_value(dict(metadata))
        return json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise JsonLimitError(f"conversation metadata is not JSON-serialisable: {error}") from None


def read_payload(payload: str, store: str, seq: int | None = None) -> Event:
    """The event a stored payload holds; StoreError naming the store (and seq) when it cannot
    be read back, which only a damaged or hand-edited store can cause."""
    try:
        return event_from_json(payload)
    except ValidationError as error:
        where = "an event" if seq is None else f"the event at seq {seq}"
        raise StoreError(
            f"store {store} is damaged: {where} cannot be read back ({error.errors()[0]['msg']}); "
            "run 'treadle store check' and restore the file from a backup"
        ) from None


def conversation_info(row: Sequence[Any], moment: Callable[[Any], datetime]) -> ConversationInfo:
    """A conversations row (id, title, created_at, updated_at, head_id, event_count, metadata,
    prompt_tokens, completion_tokens, cost_usd) as ConversationInfo; ``moment`` reads a time column. A damaged row is a StoreError naming
    the conversation and the column, never a bare ValueError."""
    column = "created_at"
    try:
        created_at = moment(row[2])
        column = "updated_at"
        updated_at = moment(row[3])
        column = "event_count"
        event_count = int(row[5])
        column = "metadata"
        metadata = row[6] if isinstance(row[6], dict) else json.loads(row[6])
        if not isinstance(metadata, dict):
            raise ValueError(f"a JSON {type(metadata).__name__}, not an object")
        column = "usage totals"
        prompt, completion, cost = int(row[7]), int(row[8]), float(row[9])
    except (TypeError, ValueError) as error:
        raise StoreError(
            f"the store is damaged: conversation {row[0]!r} has a bad {column} "
            f"({_reason(error)}); run 'treadle store check' and restore it from a backup"
        ) from None
    return ConversationInfo(
        id=row[0],
        title=row[1],
        created_at=created_at,
        updated_at=updated_at,
        head_id=row[4],
        event_count=event_count,
        metadata=metadata,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=cost,
    )


def _reason(error: Exception) -> str:
    text = str(error)
    return text if len(text) <= 120 else text[:117] + "..."


def summary_from_index(
    lines: Sequence[Line],
    nodes: Callable[[list[int]], Sequence[Node]],
    children: Callable[[list[int]], Sequence[tuple[int, Node]]],
    head: str | None,
) -> BranchSummary:
    """The branch summary from a store's line rows, reading only the events it names: each
    line's first event, head and base, the lines of the bases, and the bases' children
    (``nodes(seqs)`` and ``children(bases)`` are three point-lookup queries in all)."""
    bases = sorted({line.base for line in lines if line.base != NO_BASE})
    wanted = {seq for line in lines for seq in (line.line, line.head)} | set(bases)
    found = {node.seq: node for node in nodes(sorted(wanted))}
    below: dict[int, list[int]] = {}
    for parent, child in children(bases):
        found[child.seq] = child
        below.setdefault(parent, []).append(child.seq)
    missing = sorted({found[base].line for base in bases} - found.keys())
    found.update((node.seq, node) for node in nodes(missing))
    return summarize(lines, found, below, head)


LINK_KINDS = ("action", "observation", "agent_error", "user_rejection")
"""Kinds whose payload has link fields the audit reads (an action and the final results)."""


def audit_facts_from_rows(rows: Iterable[Sequence[Any]], start_seq: int) -> list[AuditFacts]:
    """``AuditFacts`` from rows of (seq, id, parent_seq, parent id when the parent is before
    ``start_seq``, kind, source, tool_call_id, tool_name, action_id, llm_response_id,
    has shared text, a condensation's forgotten ids as JSON text) in seq order from ``start_seq``: a parent inside the range is named by
    the id of its row (parent_seq is its position), a root by ``"__root__"``.

    Equal strings become one object (a parent's id and its children's parent_id, an action's
    call id and its result's, every "terminal"): a kept audit holds each once."""
    ids: list[str] = []
    facts: list[AuditFacts] = []
    one: dict[str, str] = {ROOT: ROOT}
    same = one.setdefault
    for row in rows:
        _, event_id, parent_seq, earlier, kind, source, call, name, action, response, text = row[
            :11
        ]
        forgotten = row[11]
        event_id = same(event_id, event_id)
        if parent_seq is None or parent_seq < 0:
            parent_id = ROOT
        elif parent_seq >= start_seq:
            parent_id = ids[parent_seq - start_seq]
        else:
            parent_id = same(earlier, earlier)
        ids.append(event_id)
        facts.append(
            AuditFacts(
                event_id,
                parent_id,
                same(kind, kind),
                same(source, source),
                same(call, call) if call else "",
                same(name, name) if name else "",
                same(action, action) if action else None,
                same(response, response) if response else None,
                bool(text),
                _forgotten_ids(forgotten) if forgotten else (),
            )
        )
    return facts


def _forgotten_ids(text: Any) -> tuple[str, ...]:
    """A condensation's ``forgotten_event_ids`` as the store's JSON function gave them."""
    ids = json.loads(text) if isinstance(text, str | bytes) else text
    return tuple(item for item in ids if isinstance(item, str)) if isinstance(ids, list) else ()
