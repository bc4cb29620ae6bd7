"""Stored payloads: the JSON text an event is stored as, refused when the store could not read
it back, and the event a stored payload holds, read back.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from treadle.events.json_limits import JsonLimitError, check_json_depth, check_json_value
from treadle.events.model import Event, event_from_json, event_to_json
from treadle.store.base import StoreError


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
