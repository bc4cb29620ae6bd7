"""Read-only JSON values, so a reader can never change a stored event's nested data.

``freeze`` turns dicts into ``FrozenDict`` and lists into tuples, recursively, and refuses what
JSON cannot carry back (NaN/Infinity, integers too long: see ``json_limits``).
"""

from __future__ import annotations

from typing import Any, NoReturn

from treadle.events.json_limits import (
    INT_BOUND,
    JsonLimitError,
    check_json_scalar,
    too_deep,
)


class FrozenDict(dict[str, Any]):
    """A dict that refuses every mutation; still a dict for JSON encoders and equality."""

    __slots__ = ()

    def _refuse(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise TypeError("event data is frozen: build a new event instead of changing this one")

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    # dict declares __hash__ = None (unhashable); a frozen one can be hashed like a tuple.
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
    ValueError: a validation error in a model) for a NaN/Infinity, an integer too long for a
    reader, or a value too deep to walk; a FrozenDict was checked when made.

    Depth is not counted here, to keep reads fast: every JSON reader checks MAX_JSON_DEPTH on
    the text first, and the store's append on the payload (``json_limits``)."""
    kind = type(value)
    if kind is str or value is None or kind is FrozenDict:
        return value
    try:
        return _freeze(value)
    except RecursionError:  # only a value made in Python can get here: far past the limit
        raise JsonLimitError(too_deep()) from None


def _freeze(value: Any, _bound: int = INT_BOUND, _frozen: type = FrozenDict) -> Any:
    # On the hot path of every event read: exact types first (strings are most values), then
    # the numbers JSON cannot carry (``x - x`` is 0 only for a finite float).
    kind = type(value)
    if kind is str or kind is bool or value is None or kind is _frozen:
        return value
    if kind is dict or isinstance(value, dict):
        return _frozen({key: _freeze(item) for key, item in value.items()})
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return tuple([_freeze(item) for item in value])
    if kind is int:
        if not -_bound < value < _bound:
            check_json_scalar(value)
    elif kind is not float or value - value != 0:
        check_json_scalar(value)  # NaN/Infinity, or a subclass of int or float
    return value


def thaw(value: Any) -> Any:
    """A mutable deep copy (plain dicts and lists), e.g. to hand to code that edits JSON."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value
