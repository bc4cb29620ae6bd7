"""Text the store can always hold: what tools and models produce is made valid UTF-8 here
(undecodable bytes and lone surrogates replaced, never raised) before it becomes an event."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` unchanged when it is valid Unicode; else with each lone surrogate (e.g. a file
    name's undecodable byte, as Python's filesystem decoding escapes it) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def storable(value: Any) -> Any:
    """``value`` (JSON-like: str, list, tuple, mapping) with every string made storable."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        return {storable_text(str(key)): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(storable(item) for item in value)
    return value
