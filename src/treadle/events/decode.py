"""Reading a log file's text (JSON Lines, or one JSON array) into events, with exact errors.

Every problem names the line (or array item) and the field: not JSON, an unknown kind, a
missing field, a wrong type. Nothing here touches the filesystem.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from treadle.errors import EventDecodeError
from treadle.events.model import EVENT_KINDS, Event, event_from_dict


def decode_events(text: str) -> list[Event]:
    """Events of a JSON Lines text (blank lines skipped) or of a JSON array of objects."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        return _decode_array(text)
    events: list[Event] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise EventDecodeError(
                f"not JSON ({error.msg} at column {error.colno})", line=number
            ) from None
        events.append(_decode_object(data, line=number))
    return events


def _decode_array(text: str) -> list[Event]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as error:
        raise EventDecodeError(
            f"not JSON ({error.msg} at column {error.colno})", line=error.lineno
        ) from None
    if not isinstance(items, list):
        raise EventDecodeError("expected a JSON array of events or JSON Lines")
    # An array has no line per event: report the 1-based item number as the "line".
    return [_decode_object(item, line=number) for number, item in enumerate(items, start=1)]


def _decode_object(data: Any, *, line: int) -> Event:
    if not isinstance(data, dict):
        raise EventDecodeError(f"expected a JSON object, got {type(data).__name__}", line=line)
    kind = data.get("kind")
    if kind is None:
        raise EventDecodeError("missing field (every event needs a kind)", line=line, field="kind")
    if kind not in EVENT_KINDS:
        raise EventDecodeError(
            f"unknown kind {kind!r}; known kinds: {', '.join(EVENT_KINDS)}", line=line, field="kind"
        )
    try:
        return event_from_dict(data)
    except ValidationError as error:
        raise _explain(error, line) from None


def _explain(error: ValidationError, line: int) -> EventDecodeError:
    """The first problem pydantic found, in words a user can act on."""
    first = error.errors()[0]
    # The discriminated union puts the kind first in the location; the field follows it.
    location = [str(part) for part in first["loc"]]
    if location and location[0] in EVENT_KINDS:
        location = location[1:]
    field = ".".join(location) or None
    kind = first["type"]
    if kind == "missing":
        message = "missing field"
    elif kind == "extra_forbidden":
        message = (
            "unknown field (events reject fields they do not model; imports keep them in 'extra')"
        )
    else:
        message = f"{first['msg']} (got {_short(first.get('input'))})"
    extra_problems = len(error.errors()) - 1
    if extra_problems:
        message += f"; and {extra_problems} more problem(s) in this event"
    return EventDecodeError(message, line=line, field=field)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
