"""The JSON Treadle takes in: one nesting limit equal to what its reader accepts, finite
numbers, integers a reader parses, text UTF-8 can encode; each refusal names its field."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from treadle.events.json_limits import (
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    JsonLimitError,
    check_json_depth,
    check_json_value,
    json_depth,
    load_json,
)
from treadle.events.model import (
    ObservationEvent,
    StateChangeEvent,
    TokenUsage,
    event_from_json,
    event_to_json,
)


def nested(levels: int) -> object:
    """A list ``levels`` deep (0: a scalar)."""
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def event_json(depth: int) -> str:
    """An event document nesting exactly ``depth`` levels: its object, ``data``, then lists."""
    return json.dumps(
        {
            "kind": "observation",
            "id": "e",
            "timestamp": "2026-01-01T00:00:00+00:00",
            "action_id": "a",
            "tool_call_id": "c",
            "tool_name": "t",
            "data": {"x": nested(depth - 2)},
        }
    )


def test_the_limit_is_exactly_what_the_store_reader_accepts():
    deepest = event_json(MAX_JSON_DEPTH)
    assert json_depth(deepest) == MAX_JSON_DEPTH
    check_json_depth(deepest)
    assert event_from_json(deepest).data["x"] is not None  # the reader takes it

    too_deep = event_json(MAX_JSON_DEPTH + 1)
    with pytest.raises(JsonLimitError, match="201 levels deep; at most 200"):
        check_json_depth(too_deep)
    with pytest.raises(ValidationError, match="recursion limit"):
        event_from_json(too_deep)  # ... and the reader refuses the same document


def test_brackets_inside_strings_do_not_count():
    text = json.dumps({"a": "[" * 5000 + '\\"{' * 300, "b": [[1]]})
    assert json_depth(text) == 3
    check_json_depth(text)
    check_json_depth(text.encode())


def test_depth_of_a_deep_text_is_found_without_recursion():
    text = "[" * 1_000_000 + "]" * 1_000_000
    assert json_depth(text) == 1_000_000
    with pytest.raises(JsonLimitError):
        load_json(text)


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ({"x": [math.nan]}, "x.0", "NaN"),
        ({"x": {"y": -math.inf}}, "x.y", "Infinity"),
        ({"x": 10**MAX_INT_DIGITS}, "x", "digits"),
        ({"x": "ok\ud800"}, "x", "lone surrogate"),
        ({"x": {"\udc00": 1}}, "x", "lone surrogate"),
        ({"x": {1: 1}}, "x", "not a string"),
        ({"x": nested(MAX_JSON_DEPTH)}, "x", "at most 200"),
        ({"x": object()}, "x", "not a JSON value"),
    ],
)
def test_values_that_would_not_read_back_are_refused_with_their_path(value, field, words):
    with pytest.raises(JsonLimitError) as caught:
        check_json_value(value)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_values_that_read_back_pass():
    check_json_value({"a": [1, 2.5, True, None, "é😀"], "b": -(10**MAX_INT_DIGITS - 1)})
    check_json_value(nested(MAX_JSON_DEPTH))


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ('{"a": {"b": NaN}}', "a.b", "NaN"),
        ('{"a": [Infinity]}', "a.0", "Infinity"),
        ('{"a": 1e400}', "a", "inf"),
        ('{"a": {"b": "\\ud800"}}', "a.b", "lone surrogate"),
        ('{"a": "\\udc00x"}', "a", "lone surrogate"),
        ('{"a": [' + "9" * (MAX_INT_DIGITS + 1) + "]}", "a.0", "digits"),
        ('{"a": ' + "[" * 600 + "]" * 600 + "}", "a", "601 levels deep"),
    ],
)
def test_load_json_refuses_what_no_store_could_read_back(text, field, words):
    with pytest.raises(JsonLimitError) as caught:
        load_json(text)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_load_json_keeps_good_json():
    assert load_json('{"a": "\\ud83d\\ude00", "b": 1e300, "c": ' + "9" * MAX_INT_DIGITS + "}")[
        "a"
    ] == ("😀")
    with pytest.raises(json.JSONDecodeError):
        load_json("{not json")


@pytest.mark.parametrize(
    "make",
    [
        lambda: ObservationEvent(
            action_id="a", tool_call_id="c", tool_name="t", data={"x": math.nan}
        ),
        lambda: StateChangeEvent(key="k", value=[math.inf]),
        lambda: StateChangeEvent(key="k", value=10**MAX_INT_DIGITS),
        lambda: StateChangeEvent(key="k", value=nested(100_000)),  # too deep to walk
        lambda: TokenUsage(cost_usd=math.inf),
        lambda: TokenUsage(prompt_tokens=10**MAX_INT_DIGITS),
    ],
)
def test_an_event_cannot_hold_what_json_cannot_carry_back(make):
    with pytest.raises(ValidationError):
        make()


def test_numbers_at_the_limits_read_back_identically():
    event = StateChangeEvent(key="k", value=[10**MAX_INT_DIGITS - 1, -1.5e308, 5e-324])
    assert event_from_json(event_to_json(event)) == event
