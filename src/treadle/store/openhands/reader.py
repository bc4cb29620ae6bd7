"""Reads one OpenHands SDK conversation folder into Treadle events, with the head as the SDK
takes it and every problem found, each naming its file. Reads only; never writes.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treadle.events.json_limits import JsonLimitError, load_json
from treadle.events.model import Event
from treadle.store.openhands.codec import event_from_sdk
from treadle.store.openhands.kinds import NOT_TREE_NODES, InvalidSdkEvent
from treadle.store.openhands.layout import BASE_STATE, MAX_EVENTS, EventFile, list_event_files
from treadle.store.openhands.problems import (
    BASE_STATE as BASE_STATE_PROBLEM,
)
from treadle.store.openhands.problems import (
    FILE_ID,
    INVALID_EVENT,
    TREE_HEAD,
    UNREADABLE,
    FolderProblem,
)

MAX_FILE_BYTES = 64 * 1024 * 1024
"""Largest JSON file read from a conversation folder (one event, or the base state): a file
past it is reported, not read."""

SIDE_TABLE_KEY = "treadle"
"""Key in ``base_state.json``'s ``agent_state`` (the SDK's free-form dict) under which an
export keeps what the SDK format cannot hold: ``{"events": {id: {field: value}}}`` (Treadle
fields of events) and ``"conversation_id"`` (a Treadle id that is not a UUID)."""


@dataclass
class OpenHandsConversation:
    """What a conversation folder holds, read as Treadle events."""

    folder: Path
    conversation_id: str | None
    base_state: dict[str, Any] | None
    """``base_state.json`` as read, minus Treadle's side table; None without one."""
    events: list[Event] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    """The file of each event, relative to the folder."""
    sdk_kinds: list[str] = field(default_factory=list)
    head: str | None = None
    """The head as the SDK takes it (None: an empty head, or no event)."""
    schema: str = "tree"
    """"tree" (events carry ``parent_id``; the state saves the head) or "linear" (older logs:
    each event's parent is the one before it, the head is the last event)."""
    problems: list[FolderProblem] = field(default_factory=list)
    notices: list[FolderProblem] = field(default_factory=list)

    _file_index: dict[str, list[str]] | None = field(default=None, init=False, repr=False)

    def files_of(self, event_ids: Iterable[str]) -> tuple[str, ...]:
        """The files holding ``event_ids`` (every file, for an id that several files carry).
        Call it once the folder is read: the index is built on the first call."""
        if self._file_index is None:
            self._file_index = {}
            for event, name in zip(self.events, self.files, strict=True):
                self._file_index.setdefault(event.id, []).append(name)
        index = self._file_index
        return tuple(
            name for event_id in dict.fromkeys(event_ids) for name in index.get(event_id, ())
        )


def read_conversation_folder(
    folder: Path, *, max_events: int = MAX_EVENTS
) -> OpenHandsConversation:
    """Read ``folder`` (``base_state.json`` + ``events/``). Never raises on bad content: every
    problem is in ``problems`` (the folder should not be imported as is) or ``notices``."""
    base_state, side_table, problems = _read_base_state(folder)
    side = side_table.get("events")
    side = side if isinstance(side, dict) else {}
    conversation_id = _conversation_id(folder, base_state, problems)
    if isinstance(side_table.get("conversation_id"), str):
        conversation_id = side_table["conversation_id"]
    conversation = OpenHandsConversation(
        folder=folder,
        conversation_id=conversation_id,
        base_state=base_state,
        problems=problems,
    )
    files, listing_problems, notices = list_event_files(folder, max_events=max_events)
    conversation.problems.extend(listing_problems)
    if base_state is None and not problems:
        conversation.notices.append(
            FolderProblem(
                BASE_STATE_PROBLEM,
                "no base_state.json: the head is the last event, as the SDK takes an unsaved "
                "head; an export writes a minimal base state",
                (BASE_STATE,),
            )
        )
    conversation.notices.extend(notices)
    for file in files:
        _read_event(folder, file, side, conversation)
    conversation.head = _sdk_head(conversation)
    tree_era = base_state is not None and "head_is_empty" in base_state
    if not tree_era and all(event.parent_id is None for event in conversation.events):
        conversation.schema = "linear"
    return conversation


def sdk_head(
    base_state: dict[str, Any] | None, event_ids: Sequence[str], sdk_kinds: Sequence[str]
) -> str | None:
    """The head the SDK resumes from (``ConversationState._resolve_active_leaf``): the saved
    ``leaf_event_id``; none when ``head_is_empty``; else the last event that is a tree node
    (state updates and conversation errors are not)."""
    state = base_state or {}
    leaf = state.get("leaf_event_id")
    if leaf is not None:
        return str(leaf)
    if state.get("head_is_empty"):
        return None
    for event_id, kind in zip(reversed(event_ids), reversed(sdk_kinds), strict=True):
        if kind not in NOT_TREE_NODES:
            return event_id
    return None


# -- internals ------------------------------------------------------------------------------


def _read_base_state(
    folder: Path,
) -> tuple[dict[str, Any] | None, dict[str, Any], list[FolderProblem]]:
    path = folder / BASE_STATE
    if not os.path.lexists(path):
        return None, {}, []
    data, problem = _read_json(path, BASE_STATE)
    if problem is not None:
        return None, {}, [problem]
    if not isinstance(data, dict):
        return None, {}, [FolderProblem(BASE_STATE_PROBLEM, "is not a JSON object", (BASE_STATE,))]
    state = data
    agent_state = state.get("agent_state")
    side_table: Any = {}
    if isinstance(agent_state, dict) and SIDE_TABLE_KEY in agent_state:
        side_table = agent_state.pop(SIDE_TABLE_KEY)
    return state, side_table if isinstance(side_table, dict) else {}, []


def _conversation_id(
    folder: Path, base_state: dict[str, Any] | None, problems: list[FolderProblem]
) -> str | None:
    if base_state is not None:
        value = base_state.get("id")
        if isinstance(value, str) and value:
            return value
        problems.append(
            FolderProblem(BASE_STATE_PROBLEM, "has no conversation 'id' string", (BASE_STATE,))
        )
        return None
    try:  # the SDK names a conversation's folder after its id (uuid hex)
        return str(uuid.UUID(folder.name))
    except ValueError:
        if not any(p.files == (BASE_STATE,) for p in problems):
            problems.append(
                FolderProblem(
                    BASE_STATE_PROBLEM,
                    f"no {BASE_STATE}, and the folder name {folder.name!r} is not a "
                    "conversation id: restore base_state.json",
                    (BASE_STATE,),
                )
            )
        return None


def _read_json(path: Path, name: str) -> tuple[Any, FolderProblem | None]:
    """The JSON value of the file at ``path`` (``name`` in the folder), or the problem that
    stops it being read: not a regular file, too big, empty, not UTF-8, not JSON, or JSON no
    store could read back (too deep, NaN, a lone surrogate: ``json_limits``)."""
    try:
        raw = _read_regular_file(path)
    except OSError as error:
        return None, FolderProblem(
            UNREADABLE, f"cannot be read: {error.strerror or error}", (name,)
        )
    except ValueError as error:
        return None, FolderProblem(UNREADABLE, str(error), (name,))
    if not raw.strip():
        return None, FolderProblem(
            UNREADABLE, "is empty (a write cut short?): restore it from a copy", (name,)
        )
    try:
        return load_json(raw.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, FolderProblem(UNREADABLE, "is not UTF-8 text", (name,))
    except json.JSONDecodeError as error:
        return None, FolderProblem(
            UNREADABLE,
            f"is not complete JSON ({error.msg} at line {error.lineno} column {error.colno}; "
            "truncated?): restore it from a copy",
            (name,),
        )
    except JsonLimitError as error:
        where = f" (field '{error.field}')" if error.field else ""
        return None, FolderProblem(
            UNREADABLE, f"holds JSON that no store can read back{where}: {error.message}", (name,)
        )


def _read_regular_file(path: Path) -> bytes:
    """The bytes of ``path``; ValueError for what is not a regular file (a FIFO would block, a
    device never end) or is bigger than MAX_FILE_BYTES."""
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ValueError("is not a regular file (a folder, device, FIFO or socket)")
        if status.st_size > MAX_FILE_BYTES:
            raise ValueError(
                f"is {status.st_size} bytes, more than the {MAX_FILE_BYTES} a file may have"
            )
        return handle.read(MAX_FILE_BYTES + 1)


def _read_event(
    folder: Path, file: EventFile, side: dict[str, Any], conversation: OpenHandsConversation
) -> None:
    data, problem = _read_json(folder / file.path, file.path)
    if problem is not None:
        conversation.problems.append(problem)
        return
    entry = side.get(file.event_id)
    try:
        decoded = event_from_sdk(data, entry if isinstance(entry, dict) else None)
    except InvalidSdkEvent as error:
        conversation.problems.append(
            FolderProblem(INVALID_EVENT, f"is not an OpenHands SDK event: {error}", (file.path,))
        )
        return
    event = decoded.event
    if event.id != file.event_id:
        conversation.problems.append(
            FolderProblem(
                FILE_ID,
                f"holds event {event.id!r} but is named for {file.event_id!r}; the SDK finds "
                "events by their file name: rename the file or fix the id",
                (file.path,),
                (event.id, file.event_id),
            )
        )
    if decoded.notice is not None:
        code, message = decoded.notice
        conversation.notices.append(FolderProblem(code, message, (file.path,), (event.id,)))
    conversation.events.append(event)
    conversation.files.append(file.path)
    conversation.sdk_kinds.append(str(data["kind"]))


def _sdk_head(conversation: OpenHandsConversation) -> str | None:
    head = sdk_head(
        conversation.base_state, [e.id for e in conversation.events], conversation.sdk_kinds
    )
    if head is not None and not any(event.id == head for event in conversation.events):
        conversation.problems.append(
            FolderProblem(
                TREE_HEAD,
                f"the saved head (leaf_event_id) {head!r} is not an event of the log; the SDK "
                "cannot resume it: restore the event's file or set leaf_event_id",
                (BASE_STATE,),
                (head,),
            )
        )
        return None
    return head
