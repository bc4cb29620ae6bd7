"""Reading a log file's text (JSON Lines, or one JSON array) into events, with exact errors.

Every problem names the line (or array item) and the field: not JSON, JSON no store could
read back (``json_limits``), an unknown kind, a missing field (``id`` and ``timestamp``
included: nothing is made up on read), a wrong type. Nothing here touches the filesystem.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from treadle.errors import EventDecodeError
from treadle.events.json_limits import MAX_JSON_DEPTH, JsonLimitError, load_json, too_deep
from treadle.events.model import EVENT_KINDS, Event, event_from_dict

PROGRESS_LINES = 1000
"""``decode_events`` tells its progress once per this many lines."""


def decode_events(text: str, progress: Callable[[int], None] | None = None) -> list[Event]:
    """Events of a JSON Lines text (blank lines skipped) or of a JSON array of objects. A
    leading byte order mark is skipped. ``progress`` is told how many more lines were read,
    every ``PROGRESS_LINES`` lines (never for an array)."""
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    if stripped.startswith("["):
        return _decode_array(text)
    events: list[Event] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if progress is not None and number % PROGRESS_LINES == 0:
            progress(PROGRESS_LINES)
        if not line.strip():
            continue
        try:
            data = load_json(line)
        except json.JSONDecodeError as error:
            raise EventDecodeError(
                f"not JSON ({error.msg} at column {error.colno})", line=number
            ) from None
        except JsonLimitError as error:
            raise EventDecodeError(error.message, line=number, field=error.field) from None
        events.append(_decode_object(data, line=number))
    return events


def _decode_array(text: str) -> list[Event]:
    try:
        # Each event may nest MAX_JSON_DEPTH deep as a line of its own; the array adds one.
        items = load_json(text, limit=MAX_JSON_DEPTH + 1)
    except json.JSONDecodeError as error:
        raise EventDecodeError(
            f"not JSON ({error.msg} at column {error.colno})", line=error.lineno
        ) from None
    except JsonLimitError as error:
        # The field is the array item's number; name it as the "line", as below.
        item = error.field.split(".")[0] if error.field else None
        field = error.field.partition(".")[2] if error.field else ""
        # The array's own level is not the event's: say the limit an event has.
        message = too_deep() if "MAX_JSON_DEPTH" in error.message else error.message
        raise EventDecodeError(
            message,
            line=int(item) + 1 if item is not None and item.isdigit() else None,
            field=field.split(".")[0] or None,
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
        message = "missing field (a reader makes up no value for it)"
    elif kind == "extra_forbidden":
        message = (
            "unknown field (events reject fields they do not model; imports keep them in 'extra')"
        )
    elif isinstance(first.get("ctx", {}).get("error"), JsonLimitError):
        message = first["ctx"]["error"].message
        field = ".".join(filter(None, [field, first["ctx"]["error"].field])) or None
    else:
        message = f"{first['msg']} (got {_short(first.get('input'))})"
    extra_problems = len(error.errors()) - 1
    if extra_problems:
        message += f"; and {extra_problems} more problem(s) in this event"
    return EventDecodeError(message, line=line, field=field)


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, default=str)
    except (ValueError, RecursionError):  # an integer too long to print, a value too deep
        return f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."
