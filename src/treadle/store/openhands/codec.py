"""One OpenHands SDK event (its JSON object) <-> one Treadle event, nothing lost either way.

SDK fields Treadle does not model ride in ``extra``; Treadle fields the SDK has no place for
ride in a "side" entry, which the writer keeps in ``base_state.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from treadle.events.frozen_json import freeze, thaw
from treadle.events.model import EVENT_CLASSES, Event, EventBase, ForeignEvent
from treadle.store.openhands.kinds import (
    BY_SDK_KIND,
    BY_TREADLE_KIND,
    InvalidSdkEvent,
    NotModelled,
    ReadFrom,
    SdkEvent,
)
from treadle.store.openhands.problems import NOT_MODELLED, RENDERING

# SDK -> Treadle: ``kinds`` reads the modelled fields; ``extra`` keeps, verbatim and by top-level
# key, whatever the original has that the canonical form of those fields would not write back
# (ABSENT_KEY lists canonical keys the original lacked). Treadle -> SDK: the canonical form with
# ``extra`` laid over it; whatever reading that back would not restore (token usage, a native
# system prompt's tool schemas, ...) is the side entry. Both directions are exact by
# construction: ``event_to_sdk`` reads its own output back to compute the side entry.

ABSENT_KEY = "openhands:absent"
"""Key in ``extra`` listing canonical SDK fields the original event did not have (a colon: no
SDK field can be called that)."""
FOREIGN_SOURCE = "environment"
"""``source`` given to an event of an unknown kind that has none (the original is restored)."""

_COMMON = ("id", "timestamp", "source", "parent_id", "kind")


class UnwritableEvent(ValueError):
    """A Treadle event that cannot be written as an SDK event and read back as itself."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """A Treadle event read from an SDK event, and a notice about it (code, text) if any."""

    event: Event
    notice: tuple[str, str] | None = None


def event_from_sdk(data: Any, side: Mapping[str, Any] | None = None) -> Decoded:
    """The Treadle event for the SDK event ``data``; ``side`` are Treadle fields an export
    saved for it. Raises InvalidSdkEvent when ``data`` is not an SDK event at all."""
    if not isinstance(data, dict):
        raise InvalidSdkEvent(f"expected a JSON object, got {type(data).__name__}")
    read = ReadFrom(data)
    kind = read.need("kind", str)
    common = {
        "id": read.need("id", str),
        "timestamp": read.need("timestamp", str),
        "parent_id": read.get("parent_id", str),
    }
    mapping = BY_SDK_KIND.get(kind)
    notice: tuple[str, str] | None = None
    if mapping is not None:
        if mapping.default_source is None:
            common["source"] = read.need("source", str)
        else:
            common["source"] = read.get("source", str, mapping.default_source)
        try:
            fields, rendering = mapping.read(read)
            event = _built(mapping.treadle_kind, {**common, **fields}, side, data)
            return Decoded(event, None if rendering is None else (RENDERING, rendering))
        except NotModelled as reason:
            notice = (NOT_MODELLED, f"{kind} kept as foreign: {reason}")
        except ValidationError as error:
            notice = (NOT_MODELLED, f"{kind} kept as foreign: {_first_problem(error)}")
    common["source"] = read.get("source", str, FOREIGN_SOURCE)
    payload = {key: value for key, value in data.items() if key not in _COMMON}
    try:
        event = _built("foreign", {**common, "foreign_kind": kind, "payload": payload}, side, data)
    except ValidationError as error:
        raise InvalidSdkEvent(_first_problem(error)) from None
    return Decoded(event, notice)


def event_to_sdk(
    event: EventBase, *, sdk_fields_only: bool = False
) -> tuple[SdkEvent, dict[str, Any] | None]:
    """The SDK event for ``event`` and its side entry (None when the SDK event holds it all).

    Reading the result back with that side entry gives ``event`` again. ``extra`` fields are
    written verbatim (an SDK wrote them, maybe a newer one); with ``sdk_fields_only``, those
    that are not fields of the kind in SDK 1.58.2 go to the side entry instead (the SDK
    refuses unknown fields: use it for events that came from elsewhere). Raises
    UnwritableEvent when no side entry can make it so (``extra`` changes its kind).
    """
    written, foreign_keys = _written(event, sdk_fields_only)
    try:
        reread = event_from_sdk(written).event
    except InvalidSdkEvent as error:
        raise UnwritableEvent(f"event {event.id!r} would be written as {error}") from None
    if reread.kind != event.kind:
        raise UnwritableEvent(
            f"event {event.id!r} ({event.kind}) would be read back as {reread.kind}: its "
            "'extra' does not fit the SDK kind it is written as"
        )
    wanted = event.model_dump(mode="json", exclude={"extra"})
    got = reread.model_dump(mode="json", exclude={"extra"})
    side = {key: value for key, value in wanted.items() if not same_json(got.get(key), value)}
    if foreign_keys:
        side["extra"] = thaw(event.extra)
    return written, side or None


def sdk_event_json(event: EventBase) -> SdkEvent:
    """The SDK event for ``event`` as a client that reads SDK 1.58.2's JSON takes it: what
    ``event_to_sdk(sdk_fields_only=True)`` writes, without reading it back (no side entry:
    for sending, not for a folder that must restore Treadle's fields). Raises
    UnwritableEvent when its ``extra`` would give it another kind."""
    written, _foreign = _written(event, True)
    expected = event.foreign_kind if isinstance(event, ForeignEvent) else None
    if expected is None:
        expected = BY_TREADLE_KIND[event.kind].sdk_kind
    if written.get("kind") != expected:
        raise UnwritableEvent(
            f"event {event.id!r} ({event.kind}) would be written as {written.get('kind')!r}"
        )
    return written


def _written(event: EventBase, sdk_fields_only: bool) -> tuple[SdkEvent, bool]:
    """The SDK event for ``event`` (its ``extra`` laid over the canonical form, in the SDK's
    key order), and whether ``sdk_fields_only`` left some of its ``extra`` out."""
    extra: Mapping[str, Any] = event.extra
    mapping = BY_TREADLE_KIND.get(event.kind)
    foreign_keys = False
    if sdk_fields_only and mapping is not None and extra:
        rank = mapping.key_rank()
        kept = {k: v for k, v in extra.items() if k in rank or k in ("kind", ABSENT_KEY)}
        foreign_keys = len(kept) != len(extra)
        extra = kept
    written = _laid_over(canonical_sdk_event(event), extra)
    if mapping is not None and extra:
        written = _in_sdk_order(written, mapping.key_rank())
    return written, foreign_keys


def canonical_sdk_event(event: EventBase) -> SdkEvent:
    """The SDK event that Treadle's modelled fields of ``event`` alone make (no ``extra``)."""
    out: SdkEvent = {"id": event.id, "timestamp": event.timestamp, "source": event.source}
    if event.parent_id is not None:
        out["parent_id"] = event.parent_id
    if isinstance(event, ForeignEvent):
        payload = thaw(event.payload)
        out.update({key: value for key, value in payload.items() if key not in _COMMON})
        out["kind"] = event.foreign_kind
    else:
        mapping = BY_TREADLE_KIND[event.kind]
        out.update(mapping.write(event))
        out["kind"] = mapping.sdk_kind
    return out


def same_json(left: Any, right: Any) -> bool:
    """Equal as JSON text would be: ``true`` is not ``1``, ``1`` is not ``1.0``; a tuple or a
    FrozenDict (frozen event data) equals the list or dict with the same items."""
    # ``==`` takes True for 1 and 1 for 1.0, and a tuple for no list: containers are compared
    # by their encoding (C, keys sorted), scalars by type and value.
    if isinstance(left, list | tuple | dict) or isinstance(right, list | tuple | dict):
        return _encoded(left) == _encoded(right)
    return type(left) is type(right) and bool(left == right)


_encoded = json.JSONEncoder(sort_keys=True, ensure_ascii=False, check_circular=False).encode


# -- internals ------------------------------------------------------------------------------


def _built(
    treadle_kind: str, values: dict[str, Any], side: Mapping[str, Any] | None, original: SdkEvent
) -> Event:
    """The Treadle event of ``values`` (then ``side``) with ``extra``: what ``original`` has
    that the canonical form of those values would not write."""
    if side:
        values = {**values, **side}
    bare = EVENT_CLASSES[treadle_kind].model_validate(values)
    if side and "extra" in side:  # saved whole by an export that could not write all of it
        return bare
    extra = _difference(original, canonical_sdk_event(bare))
    if not extra:
        return bare
    return bare.model_copy(update={"extra": freeze(extra)})


def _difference(original: SdkEvent, canonical: SdkEvent) -> dict[str, Any]:
    extra = {
        key: value
        for key, value in original.items()
        if key not in canonical or not same_json(canonical[key], value)
    }
    absent = [key for key in canonical if key not in original]
    if absent:
        extra[ABSENT_KEY] = absent
    return extra


def _laid_over(canonical: SdkEvent, extra: Mapping[str, Any]) -> SdkEvent:
    """``canonical`` with ``extra`` laid over it; ``kind`` stays last, as the SDK writes it."""
    if not extra:
        return canonical
    out = dict(canonical)
    kind = out.pop("kind")
    absent = set(extra.get(ABSENT_KEY, ()))
    for key, value in extra.items():
        if key != ABSENT_KEY:
            out[key] = thaw(value)
    for key in absent:
        out.pop(key, None)
    if "kind" not in absent and "kind" not in out:
        out["kind"] = kind
    return out


def _in_sdk_order(sdk_event: SdkEvent, rank: dict[str, int]) -> SdkEvent:
    """``sdk_event`` with its keys in the SDK's field order; unknown keys after them (in their
    order), ``kind`` last."""
    last = len(rank)
    keys = sorted(sdk_event, key=lambda key: last + 1 if key == "kind" else rank.get(key, last))
    return {key: sdk_event[key] for key in keys}


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    return f"field '{location}': {first['msg']}" if location else first["msg"]
