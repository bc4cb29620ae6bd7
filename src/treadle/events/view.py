"""What a person or a client sees of a conversation, by the core's own rules: the transcript
of a path (one item per model response, each call with its result or state) and, per stored
event read in append order, the facts a stream frame carries (resolved parent, answered action).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast

from treadle.events.links import Linker
from treadle.events.model import RESULT_KINDS, ActionEvent, EventBase, event_to_dict
from treadle.events.tree import resolved_parent_id

TranscriptItem = dict[str, Any]
"""One JSON-ready transcript item; ``type`` is response, message, system_prompt, condensation,
state_change, result (a result that answers no call), pause or foreign."""

CALL_STATES = ("done", "rejected", "errored", "pending", "interrupted")
"""A call's state: answered by an observation, a user rejection, an agent error; or not
answered yet (pending), or not answered though the conversation moved on (interrupted)."""

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
    "TranscriptItem",
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


def transcript(
    path: Sequence[EventBase],
    side: Iterable[Beside] = (),
    seqs: Sequence[int] | None = None,
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
    event} | None, "state": one of CALL_STATES}``.
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
        call_of_action[action_id]["state"] = "interrupted" if moved_on else "pending"
    return _with_side_events(items, item_of_event, side)


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
