"""Writes Treadle events and a head to the OpenHands SDK layout: ``events/event-NNNNN-<id>.json``
(one SDK event each, in append order) and a ``base_state.json`` that saves the head.

The folder appears whole or not at all: it is written beside its target, then renamed.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treadle.errors import TreadleError
from treadle.events.model import EventBase
from treadle.store.openhands.codec import UnwritableEvent, event_to_sdk
from treadle.store.openhands.kinds import sdk_kind_of
from treadle.store.openhands.layout import BASE_STATE, EVENT_NAME_RE, EVENTS_DIR, event_file_name
from treadle.store.openhands.reader import SIDE_TABLE_KEY, sdk_head

TREADLE_NAMESPACE = uuid.UUID("6f1c3f5e-8d4b-4c36-9a57-2f0e1d8b7a10")
"""For SDK conversation ids (UUIDs) of Treadle conversations whose id is not a UUID."""


class ExportError(TreadleError):
    """A conversation that cannot be written as an SDK folder; nothing was written."""


@dataclass(frozen=True, slots=True)
class WrittenFolder:
    folder: Path
    sdk_conversation_id: str
    event_count: int
    side_entries: int
    """Events with Treadle fields the SDK format cannot hold, kept in base_state.json."""


def write_conversation_folder(
    folder: Path,
    events: Sequence[EventBase],
    *,
    head: str | None,
    conversation_id: str,
    base_state: dict[str, Any] | None = None,
    model: str | None = None,
    working_dir: str | None = None,
) -> WrittenFolder:
    """Write ``events`` (append order) and ``head`` as an SDK conversation folder at ``folder``,
    which must not exist or be empty.

    ``base_state`` is the one an import kept (written back as it was, the head excepted when it
    moved); without one a minimal state the SDK can load is made, naming ``model`` and
    ``working_dir`` when given. With a base state the events came from the SDK, and their
    ``extra`` fields are SDK fields, written verbatim; without one, ``extra`` fields unknown to
    SDK 1.58.2 are kept in the side table instead, so that the SDK loads the folder.
    Raises ExportError naming the event or the folder at fault.
    """
    _check_target(folder)
    files: list[tuple[str, str]] = []
    side: dict[str, Any] = {}
    for index, event in enumerate(events):
        if not EVENT_NAME_RE.match(event_file_name(index, event.id)):
            raise ExportError(
                f"event {event.id!r} cannot be an SDK event file: the SDK reads only files "
                "whose event id is 8 or more hex digits and dashes (a UUID)"
            )
        try:
            sdk_event, entry = event_to_sdk(event, sdk_fields_only=base_state is None)
        except UnwritableEvent as error:
            raise ExportError(str(error)) from None
        if entry is not None:
            side[event.id] = entry
        files.append((event_file_name(index, event.id), _compact(sdk_event)))
    state = _base_state(base_state, events, head, conversation_id, folder, model, working_dir)
    side_table: dict[str, Any] = {"events": side} if side else {}
    if str(state.get("id")) != conversation_id:
        side_table["conversation_id"] = conversation_id
    if side_table:
        state.setdefault("agent_state", {})[SIDE_TABLE_KEY] = side_table
    try:
        _write_whole(folder, files, _compact(state))
    except OSError as error:
        raise ExportError(f"cannot write {folder}: {error.strerror or error}") from None
    return WrittenFolder(folder, str(state["id"]), len(files), len(side))


def sdk_conversation_id(conversation_id: str) -> str:
    """The SDK's id (a UUID) for a Treadle conversation id."""
    try:
        return str(uuid.UUID(conversation_id))
    except ValueError:
        return str(uuid.uuid5(TREADLE_NAMESPACE, conversation_id))


# -- internals ------------------------------------------------------------------------------


def _check_target(folder: Path) -> None:
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ExportError(f"{folder} exists and is not an empty folder: choose a new one")


def _base_state(
    kept: dict[str, Any] | None,
    events: Sequence[EventBase],
    head: str | None,
    conversation_id: str,
    folder: Path,
    model: str | None,
    working_dir: str | None,
) -> dict[str, Any]:
    if kept is not None:
        state = copy.deepcopy(kept)
    else:
        # What ConversationState needs to load (its own defaults fill the rest).
        state = {
            "id": sdk_conversation_id(conversation_id),
            "agent": {
                "llm": {"model": model or "unknown", "usage_id": "default"},
                "tools": [],
                "kind": "Agent",
            },
            "workspace": {"working_dir": working_dir or str(folder), "kind": "LocalWorkspace"},
            "persistence_dir": str(folder),
            "execution_status": "idle",
            "head_is_empty": False,
        }
    # Keep the saved head as it was written (a null one too) unless it no longer resolves to
    # the head: the SDK's rules decide, as when it resumes.
    kinds = [sdk_kind_of(event) for event in events]
    if sdk_head(state, [event.id for event in events], kinds) != head:
        if head is None:
            state.pop("leaf_event_id", None)
        else:
            state["leaf_event_id"] = head
        state["head_is_empty"] = head is None and len(events) > 0
    return state


def _compact(value: Any) -> str:
    """As the SDK writes (pydantic's ``model_dump_json``): no spaces, UTF-8 kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _write_whole(folder: Path, files: list[tuple[str, str]], base_state: str) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        events_dir = staging / EVENTS_DIR
        events_dir.mkdir()
        for name, text in files:
            (events_dir / name).write_text(text, encoding="utf-8")
        (staging / BASE_STATE).write_text(base_state, encoding="utf-8")
        if folder.exists():
            folder.rmdir()  # checked empty above
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
