"""What a person or a client sees of a conversation, by the core's own rules: the transcript
of a path (one item per model response, each call with its result or state), the same kept up
live (``TranscriptFollower``: what each stored event changes in it) and, per stored event read in
append order, the facts a stream frame carries (resolved parent, answered action). The items'
wire shape is ``treadle.data.transcript`` (typed there; JSON-ready dicts here).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast

from treadle.events.links import Linker
from treadle.events.model import (
    RESULT_KINDS,
    ActionEvent,
    CondensationEvent,
    EventBase,
    event_to_dict,
)
from treadle.events.tree import resolved_parent_id

TranscriptItem = dict[str, Any]
"""One JSON-ready transcript item, as ``api.transcript.TranscriptItem`` types it; ``type`` is response, message, system_prompt, condensation, state_change, result (a
result that answers no call), pause or foreign."""

CALL_STATES = ("done", "rejected", "errored", "pending", "waiting", "running", "interrupted")
"""A call's state: answered by an observation, a user rejection, an agent error; or not
answered yet (pending; waiting or running while the status says so: ``shown_state``), or not
answered though the conversation moved on (interrupted)."""

_RESULT_STATE = {"observation": "done", "user_rejection": "rejected", "agent_error": "errored"}
_ENDS_RESPONSE = frozenset(
    {"message", "system_prompt", "condensation", "observation", "agent_error", "user_rejection"}
)
"""Kinds that end a response's batch (the visible ones, as PROJECT-BATCH; a condensation too)."""
_MOVES_ON = frozenset({"message", "system_prompt", "action"})
"""Kinds after which an unanswered call of an earlier response will not be answered."""

__all__ = [
    "CALL_STATES",
    "SHOWN_STATE_KEYS",
    "Beside",
    "LogFollower",
    "TranscriptFollower",
    "TranscriptItem",
    "shown_state",
    "transcript",
]


SHOWN_STATE_KEYS = frozenset({"head", "model_error", "pause_request"})
"""State changes worth an item: a head move, a model answer the runtime could not use, a
request to pause. (Statuses are in every stream frame; other keys are bookkeeping.)"""


class Beside(NamedTuple):
    """An event beside the path (a state change) with its resolved parent and its seq."""

    event: EventBase
    parent_id: str | None
    seq: int | None = None


def shown_state(state: str, status: str | None) -> str:
    """A call's state as shown while the conversation has ``status``: a call with no result
    yet is waiting (for a confirmation) or running when the status says so."""
    if state == "pending":
        if status == "waiting_for_confirmation":
            return "waiting"
        if status == "running":
            return "running"
    return state


def transcript(
    path: Sequence[EventBase],
    side: Iterable[Beside] = (),
    seqs: Sequence[int] | None = None,
    status: str | None = None,
) -> list[TranscriptItem]:
    """The transcript of ``path`` (root first, as ``path_to_root`` returns it); ``seqs``, when
    given, are the path's seqs (each item and call then tells its events' seqs, else None).

    Consecutive actions of one response are one ``response`` item (PROJECT-BATCH: only
    another kind of visible event ends it; pauses, state changes and foreign events do not).
    Each call is paired with the result that answers it by ``links.Linker`` (``action_id``
    first, then ``tool_call_id``), wherever on the path the result arrived; a result that
    answers no call is an item of its own. ``side`` holds events beside the path (state
    changes) with their resolved parents: each with a key in ``SHOWN_STATE_KEYS`` is shown
    after the item holding its parent, in the given order; one whose parent is not on the
    path is left out. Every item has ``event_id`` (its first event), ``parent_id`` (the
    resolved parent of that event) and ``seq`` (that event's); a single event's item has
    ``event``; a response has ``calls``, each ``{"action": {seq, event}, "result": {seq,
    event} | None, "state": one of CALL_STATES}`` (``status``: the conversation's, which
    tells a pending call as waiting or running, ``shown_state``). An item whose events a
    condensation on the path forgot has ``folded_by`` (that condensation's id; else None).
    """
    items: list[TranscriptItem] = []
    item_of_event: dict[str, int] = {}
    call_of_action: dict[str, dict[str, Any]] = {}
    linker = Linker()
    response: TranscriptItem | None = None
    action_position: dict[str, int] = {}
    previous_id: str | None = None
    for position, event in enumerate(path):
        kind = event.kind
        parent_id = previous_id  # on a path, the parent is the event before
        previous_id = event.id
        seq = seqs[position] if seqs is not None else None
        answered = linker.feed(event)
        if isinstance(event, ActionEvent):
            response_id = event.llm_response_id
            if response is None or response["llm_response_id"] != response_id:
                response = {
                    "type": "response",
                    "event_id": event.id,
                    "parent_id": parent_id,
                    "seq": seq,
                    "llm_response_id": response_id,
                    "thought": event.thought,
                    "reasoning": event.reasoning,
                    "calls": [],
                    "folded_by": None,
                }
                items.append(response)
            call: dict[str, Any] = {"action": _entry(event, seq), "result": None}
            response["calls"].append(call)
            call_of_action[event.id] = call
            action_position[event.id] = position
            item_of_event[event.id] = len(items) - 1
            continue
        if kind not in _ENDS_RESPONSE:
            # a pause, state change or foreign event: an item of its own between calls of
            # one response, which goes on (later calls join its item)
            item_of_event[event.id] = len(items)
            items.append(_single(event, parent_id, seq))
            continue
        response = None
        if kind in RESULT_KINDS and answered is not None:
            call = call_of_action[answered]
            call["result"] = _entry(event, seq)
            call["state"] = _RESULT_STATE[kind]
            item_of_event[event.id] = item_of_event[answered]
            continue
        item_of_event[event.id] = len(items)
        items.append(_single(event, parent_id, seq))
    for action_id in linker.open_actions:
        moved_on = _moved_on_after(path, action_position[action_id])
        state = "interrupted" if moved_on else shown_state("pending", status)
        call_of_action[action_id]["state"] = state
    _fold(items, path)
    return _with_side_events(items, item_of_event, side)


def _fold(items: list[TranscriptItem], path: Sequence[EventBase]) -> None:
    """Mark the items whose every event a condensation on ``path`` forgot (``folded_by``)."""
    forgotten_by: dict[str, str] = {}
    for event in path:
        if isinstance(event, CondensationEvent):
            for forgotten in event.forgotten_event_ids:
                forgotten_by.setdefault(forgotten, event.id)
    if not forgotten_by:
        return
    for item in items:
        if item["type"] == "response":
            ids = [call["action"]["event"]["id"] for call in item["calls"]]
        else:
            ids = [item["event_id"]]
        if all(event_id in forgotten_by for event_id in ids):
            item["folded_by"] = forgotten_by[ids[0]]


def _moved_on_after(path: Sequence[EventBase], position: int) -> bool:
    """Whether a message, a system prompt or another response's call follows the action at
    ``position``: the conversation went on without its result (only unanswered calls ask)."""
    response_id = cast(ActionEvent, path[position]).llm_response_id
    for event in path[position + 1 :]:
        if event.kind in _MOVES_ON and (
            not isinstance(event, ActionEvent) or event.llm_response_id != response_id
        ):
            return True
    return False


def _entry(event: EventBase, seq: int | None) -> dict[str, Any]:
    return {"seq": seq, "event": event_to_dict(event)}


def _single(event: EventBase, parent_id: str | None, seq: int | None) -> TranscriptItem:
    kind = event.kind
    return {
        "type": "result" if kind in RESULT_KINDS else kind,
        "event_id": event.id,
        "parent_id": parent_id,
        "seq": seq,
        "event": event_to_dict(event),
        "folded_by": None,
    }


def _with_side_events(
    items: list[TranscriptItem],
    item_of_event: dict[str, int],
    side: Iterable[Beside],
) -> list[TranscriptItem]:
    after: dict[int, list[TranscriptItem]] = {}
    for event, parent_id, seq in side:
        if getattr(event, "key", None) not in SHOWN_STATE_KEYS:
            continue
        index = item_of_event.get(parent_id) if parent_id is not None else None
        if index is not None:
            after.setdefault(index, []).append(_single(event, parent_id, seq))
    if not after:
        return items
    placed: list[TranscriptItem] = []
    for index, item in enumerate(items):
        placed.append(item)
        placed.extend(after.get(index, ()))
    return placed


class LogFollower:
    """Follows a log in append order (seq) and tells, for each event, its resolved parent
    (TREE-PARENT, ``tree.resolved_parent_id``) and the action it answers (``links.Linker``).

    One linker over the whole log: on one branch that is the path's own linking; a result
    on another branch naming its action by ``action_id`` links the same way, since ids are
    unique in a log. ``seed`` the events up to where a reader starts, then ``feed`` the rest.
    """

    __slots__ = ("_linker", "_previous_id")

    def __init__(self) -> None:
        self._linker = Linker()
        self._previous_id: str | None = None

    def feed(self, event: EventBase) -> tuple[str | None, str | None]:
        """``(parent_id, answers)`` of the next event: its resolved parent (None: a root),
        and the id of the action it answers (None unless it is a result that answers one)."""
        parent_id = resolved_parent_id(event, self._previous_id)
        self._previous_id = event.id
        return parent_id, self._linker.feed(event)


MAX_FOLLOWED = 100_000
"""Events a ``TranscriptFollower`` remembers the items of (the newest): a hub following a
long live conversation keeps a bounded memory; an older item is then updated no more live
(a client loading its page gets it whole)."""


class _OpenCall:
    """A call with no result yet: where it is shown and the state last told."""

    __slots__ = ("entry", "index", "item", "state")

    def __init__(self, item: str, index: int, entry: dict[str, Any], state: str) -> None:
        self.item, self.index, self.entry, self.state = item, index, entry, state

    def call(self) -> dict[str, Any]:
        return {"action": self.entry, "result": None, "state": self.state}


class TranscriptFollower:
    """The transcript kept up live: fed the log in append order (every branch) with the
    status after each event, it tells what the event changes in the transcript of the paths
    it continues, as ``api.transcript.TranscriptUpdate``s: a new item (shown after the item
    showing its parent), a call added to its response or changed (its result arrived; the status
    made it waiting or running; the conversation went on without it), items folded by a
    condensation. The rules are ``transcript``'s, one event at a time: a client showing a
    path that applies the updates of the events continuing it holds what ``transcript``
    makes of the longer path.

    Results are linked by one linker over the whole log (``LogFollower``). Seeded from a
    window of the log it knows that window's items only: a fold names a forgotten event it
    does not know as an item (an item's key is its first event's id).
    """

    __slots__ = ("_actions", "_item_of", "_log", "_open", "_pending", "_response", "_status")

    def __init__(self) -> None:
        self._log = LogFollower()
        self._item_of: dict[str, str] = {}
        """Event id -> the key of the item showing it."""
        self._actions: dict[str, list[str]] = {}
        """A response item's key -> its calls' action ids, in order."""
        self._response: dict[str, tuple[str, str]] = {}
        """Event id -> (key, llm_response_id) of the response its path is in (a later call of
        the same response joins that item)."""
        self._pending: dict[str, tuple[str, ...]] = {}
        """Event id -> the calls left with no result on its path up to it (none: absent)."""
        self._open: dict[str, _OpenCall] = {}
        self._status: str | None = None

    def feed(
        self, event: EventBase, seq: int | None, status: str | None
    ) -> tuple[str | None, str | None, list[dict[str, Any]]]:
        """``(parent_id, answers, updates)`` of the next event (``LogFollower.feed``'s, and
        what it changes in the transcript); ``status``: the conversation's after it."""
        parent_id, answers = self._log.feed(event)
        updates: list[dict[str, Any]] = []
        pending = self._pending.get(parent_id, ()) if parent_id is not None else ()
        kind = event.kind
        if isinstance(event, ActionEvent):
            self._action(event, seq, parent_id, pending, status, updates)
        elif kind not in _ENDS_RESPONSE:  # a pause, a state change, a foreign event
            shown = kind != "state_change" or getattr(event, "key", None) in SHOWN_STATE_KEYS
            if shown and (kind != "state_change" or parent_id is not None):
                updates.append(self._added(_single(event, parent_id, seq)))
            # the response goes on after it (a legacy event after it has it as its parent)
            if kind == "state_change" and parent_id is not None:
                self._remember(event.id, self._item_of.get(parent_id, parent_id), pending)
            else:
                self._remember(event.id, event.id, pending)
            if parent_id is not None and (response := self._response.get(parent_id)):
                self._response[event.id] = response
        elif kind in RESULT_KINDS and answers is not None and answers in self._open:
            call = self._open.pop(answers)
            self._remember(event.id, call.item, tuple(a for a in pending if a != answers))
            state = _RESULT_STATE[kind]
            answered = {"action": call.entry, "result": _entry(event, seq), "state": state}
            updates.append({"op": "call", "item": call.item, "index": call.index, "call": answered})
        else:
            if kind in _MOVES_ON:
                self._interrupt(pending, updates)
                pending = ()
            self._remember(event.id, event.id, pending)
            updates.append(self._added(_single(event, parent_id, seq)))
            if isinstance(event, CondensationEvent):
                self._fold(event, updates)
        if status != self._status:
            self._status = status
            self._restate(updates)
        self._trim()
        return parent_id, answers, updates

    def _action(
        self,
        event: ActionEvent,
        seq: int | None,
        parent_id: str | None,
        pending: tuple[str, ...],
        status: str | None,
        updates: list[dict[str, Any]],
    ) -> None:
        response = self._response.get(parent_id) if parent_id is not None else None
        entry = _entry(event, seq)
        call = _OpenCall("", 0, entry, shown_state("pending", status))
        if response is None or response[1] != event.llm_response_id:
            self._interrupt(pending, updates)  # another response: the open calls stay open
            pending = ()
            call.item = event.id
            self._actions[event.id] = [event.id]
            item: TranscriptItem = {
                "type": "response",
                "event_id": event.id,
                "parent_id": parent_id,
                "seq": seq,
                "llm_response_id": event.llm_response_id,
                "thought": event.thought,
                "reasoning": event.reasoning,
                "calls": [call.call()],
                "folded_by": None,
            }
            updates.append(self._added(item))
        else:
            call.item = response[0]
            actions = self._actions.setdefault(call.item, [])
            call.index = len(actions)
            actions.append(event.id)
            updates.append(
                {"op": "call", "item": call.item, "index": call.index, "call": call.call()}
            )
        self._open[event.id] = call
        self._remember(event.id, call.item, (*pending, event.id))
        self._response[event.id] = (call.item, event.llm_response_id)

    @staticmethod
    def _added(item: TranscriptItem) -> dict[str, Any]:
        return {"op": "item", "item": item}

    def _remember(self, event_id: str, item: str, pending: tuple[str, ...]) -> None:
        self._item_of[event_id] = item
        if pending:
            self._pending[event_id] = pending

    def _interrupt(self, pending: tuple[str, ...], updates: list[dict[str, Any]]) -> None:
        """The path went on (a message, a system prompt, another response) without these
        calls' results: each still open is interrupted (a late result still answers it)."""
        for action_id in pending:
            call = self._open.get(action_id)
            if call is not None and call.state != "interrupted":
                call.state = "interrupted"
                updates.append(self._changed(call))

    def _restate(self, updates: list[dict[str, Any]]) -> None:
        """The status changed: each open call shows the state it gives (waiting, running)."""
        for call in self._open.values():
            if call.state == "interrupted":
                continue
            state = shown_state("pending", self._status)
            if state != call.state:
                call.state = state
                updates.append(self._changed(call))

    @staticmethod
    def _changed(call: _OpenCall) -> dict[str, Any]:
        return {"op": "call", "item": call.item, "index": call.index, "call": call.call()}

    def _fold(self, event: CondensationEvent, updates: list[dict[str, Any]]) -> None:
        forgotten = set(event.forgotten_event_ids)
        keys = dict.fromkeys(self._item_of.get(e, e) for e in event.forgotten_event_ids)
        folded = [
            key
            for key in keys
            if key not in self._actions or all(a in forgotten for a in self._actions[key])
        ]
        if folded:
            updates.append({"op": "fold", "by": event.id, "items": folded})

    def _trim(self) -> None:
        """Forget the oldest events' items past ``MAX_FOLLOWED`` (bounded memory)."""
        if len(self._item_of) <= MAX_FOLLOWED:
            return
        for table in (self._item_of, self._response, self._pending, self._actions):
            for key in list(itertools.islice(table, max(0, len(table) - MAX_FOLLOWED * 9 // 10))):
                del table[key]
