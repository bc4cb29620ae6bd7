"""What JSON Treadle takes in, so that whatever it stores reads back identically: one nesting
limit (the one its reader enforces), finite numbers, integers a reader parses, valid UTF-8 text.

Every way in (log files, imports, the API, the store's append) checks with these; nothing else
decides them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

from treadle.errors import TreadleError

MAX_JSON_DEPTH = 200
"""Deepest nesting of one JSON document (an event: its object is level 1; ``{"a": [1]}`` is 2
deep). pydantic-core's JSON parser, which reads events back from a store, refuses one more."""

MAX_INT_DIGITS = 4300
"""Most digits of a JSON integer: Python's int/str limit, which ``json`` and pydantic-core's
parser both enforce (a longer one is written fine and then cannot be read back)."""

INT_BOUND = 10**MAX_INT_DIGITS
"""Integers must lie strictly between -INT_BOUND and INT_BOUND."""


class JsonLimitError(TreadleError, ValueError):
    """JSON that Treadle does not take: too deep, NaN/Infinity, an integer too long, a lone
    surrogate. ``field`` is where, as a dotted path, when known."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        self.message = message
        super().__init__(f"field '{field}': {message}" if field else message)


def too_deep(depth: int | None = None, *, limit: int = MAX_JSON_DEPTH) -> str:
    """The one wording of the nesting limit, for every place that enforces it."""
    found = f"nests {depth} levels deep" if depth is not None else "nests too deep"
    return f"JSON {found}; at most {limit} levels are accepted (MAX_JSON_DEPTH)"


# -- nesting, on the text (before any parser recurses into it) -------------------------------

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str | bytes) -> int:
    """How deep the JSON ``text`` nests (0 for a scalar); brackets inside strings do not count.
    Runs at C speed (regexes, ``accumulate``): no recursion, whatever the input."""
    if isinstance(text, bytes):
        # latin-1 maps bytes one to one: quotes, backslashes and brackets stay where they are
        # (UTF-8 never uses ASCII bytes inside a multi-byte character).
        text = text.decode("latin-1")
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def check_json_depth(text: str | bytes, *, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise JsonLimitError when the JSON ``text`` nests deeper than ``limit`` (default: what
    reading accepts). Call it on raw input before parsing it; it costs two ``count`` calls
    when the text has no more brackets than ``limit``."""
    if isinstance(text, bytes):
        brackets = text.count(b"[") + text.count(b"{")
    else:
        brackets = text.count("[") + text.count("{")
    if brackets <= limit:
        return
    depth = json_depth(text)
    if depth > limit:
        raise JsonLimitError(too_deep(depth, limit=limit))


# -- values ---------------------------------------------------------------------------------


def check_json_scalar(value: Any) -> None:
    """Raise JsonLimitError for a number JSON cannot carry back (NaN, ±Infinity, an integer
    of more than MAX_INT_DIGITS digits). Strings are not looked at (see ``check_json_value``)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JsonLimitError(f"{value} is not a JSON number (NaN and Infinity are refused)")
    elif isinstance(value, int) and not -INT_BOUND < value < INT_BOUND:
        raise JsonLimitError(f"an integer of more than {MAX_INT_DIGITS} digits (MAX_INT_DIGITS)")


def check_json_value(value: Any, *, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise JsonLimitError (naming the path) unless ``value`` is JSON that reads back as
    itself: dicts with string keys, lists/tuples, finite numbers, integers of at most
    MAX_INT_DIGITS digits, strings without lone surrogates, nesting at most ``limit`` deep.
    Walks iteratively: safe on any depth. E.g. on a request body after ``json.loads``."""
    for path, item, depth in _walk(value):
        if depth > limit:
            raise JsonLimitError(too_deep(limit=limit), field=_dotted(path[:1]))
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    raise JsonLimitError(
                        f"object key {key!r} is not a string", field=_dotted(path) or None
                    )
                _check_text(key, path)
        elif item is not None and not isinstance(item, bool | list | tuple):
            if not isinstance(item, int | float):
                raise JsonLimitError(
                    f"{type(item).__name__} is not a JSON value", field=_dotted(path) or None
                )
            try:
                check_json_scalar(item)
            except JsonLimitError as error:
                raise JsonLimitError(error.message, field=_dotted(path) or None) from None


def load_json(text: str | bytes, *, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that takes only what Treadle can store and read back identically (nesting
    at most ``limit``); raises JsonLimitError, naming the top-level field at fault when it can,
    or json.JSONDecodeError (not JSON)."""
    try:
        check_json_depth(text, limit=limit)
    except JsonLimitError as error:
        raise JsonLimitError(error.message, field=_deep_field(text, limit)) from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError:
        raise
    except JsonLimitError as error:  # NaN/Infinity: find where
        raise JsonLimitError(error.message, field=_constant_field(text)) from None
    except ValueError as error:  # Python's int/str digit limit: name the field that holds it
        if "digits" not in str(error):
            raise
        raise JsonLimitError(
            f"an integer of more than {MAX_INT_DIGITS} digits (MAX_INT_DIGITS)",
            field=_long_int_field(text),
        ) from None
    if _SUSPECT.search(text if isinstance(text, str) else text.decode("latin-1")):
        check_json_value(value, limit=limit)  # a \uD800-style escape, or a float that may be inf
    return value


# -- internals ------------------------------------------------------------------------------

_SUSPECT = re.compile(r"\\u[dD][89a-fA-F]|[0-9][eE][+-]?\d{3}")
"""A surrogate escape (maybe lone) or a float exponent of 3+ digits (maybe Infinity): only
then is a parsed value walked."""


def _refuse_constant(name: str) -> Any:
    raise JsonLimitError(f"{name} is not a JSON number (NaN and Infinity are refused)")


def _check_text(text: str, path: tuple[str, ...]) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JsonLimitError(
            "text holds a lone surrogate (e.g. \\ud800), which UTF-8 cannot encode",
            field=_dotted(path) or None,
        ) from None


def _walk(value: Any) -> Iterator[tuple[tuple[str, ...], Any, int]]:
    """(path, value, depth) of ``value`` and everything in it, depth first, no recursion."""
    stack: list[tuple[tuple[str, ...], Any, int]] = [((), value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            depth += 1
            yield path, item, depth
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend(((*path, str(key)), child, depth) for key, child in pairs)
        else:
            yield path, item, depth


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _deep_field(text: str | bytes, limit: int) -> str | None:
    """The top-level field of ``text`` (an array's: "item.field") that nests deeper than
    ``limit``, if Python's parser can still read it (it gives up near 1,000 levels)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    keep = 2 if isinstance(value, list) else 1  # an array's item number, then its field
    for path, _item, depth in _walk(value):
        if depth > limit:
            return _dotted(path[:keep]) or None
    return None


class _Marker:
    """Stands for a value Python's parser cannot convert, so that its place can be found."""


def _constant_field(text: str | bytes) -> str | None:
    return _marked_field(text, parse_constant=lambda _name: _Marker())


def _long_int_field(text: str | bytes) -> str | None:
    def parse_int(digits: str) -> Any:
        return _Marker() if len(digits.lstrip("-")) > MAX_INT_DIGITS else int(digits)

    return _marked_field(text, parse_int=parse_int)


def _marked_field(text: str | bytes, **hooks: Any) -> str | None:
    try:
        value = json.loads(text, **hooks)
    except ValueError:
        return None
    for path, item, _depth in _walk(value):
        if isinstance(item, _Marker):
            return _dotted(path) or None
    return None
