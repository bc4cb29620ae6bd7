"""Read-only JSON values, so a reader can never change a stored event's nested data.

``freeze`` turns dicts into ``FrozenDict`` and lists into tuples, recursively, and refuses what
JSON cannot carry back (too deep, NaN/Infinity, integers too long: see ``json_limits``).
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

from treadle.events.json_limits import (
    INT_BOUND,
    MAX_JSON_DEPTH,
    JsonLimitError,
    check_json_scalar,
    too_deep,
)


class FrozenDict(dict):  # type: ignore[type-arg]
    """A dict that refuses every mutation; still a dict for JSON encoders and equality."""

    __slots__ = ()

    def _refuse(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise TypeError("event data is frozen: build a new event instead of changing this one")

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda item: item[0])))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, _memo: dict[int, Any]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


def freeze(value: Any) -> Any:
    """The same JSON value with every dict and list made immutable. Raises JsonLimitError (a
    ValueError: a validation error in a model) for a value nested deeper than MAX_JSON_DEPTH,
    a NaN/Infinity or an integer too long for a reader; a FrozenDict was checked when made."""
    return _freeze(value, MAX_JSON_DEPTH)


def _freeze(value: Any, room: int) -> Any:
    # On the hot path of every event read: plain recursion, the common cases first.
    if isinstance(value, FrozenDict):
        return value
    if isinstance(value, dict):
        if room <= 0:
            raise JsonLimitError(too_deep())
        room -= 1
        return FrozenDict({key: _freeze(item, room) for key, item in value.items()})
    if isinstance(value, list | tuple):
        if room <= 0:
            raise JsonLimitError(too_deep())
        room -= 1
        return tuple(_freeze(item, room) for item in value)
    if isinstance(value, float):
        if not math.isfinite(value):
            check_json_scalar(value)
    elif isinstance(value, int) and not -INT_BOUND < value < INT_BOUND:
        check_json_scalar(value)
    return value


def thaw(value: Any) -> Any:
    """A mutable deep copy (plain dicts and lists), e.g. to hand to code that edits JSON."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value
