"""Decoding log text: each kind of bad input names its line and field."""

import pytest

from treadle.errors import EventDecodeError
from treadle.events.decode import decode_events

GOOD = '{"kind":"message","id":"a","source":"user","text":"hi","timestamp":"2026-01-01T00:00:00+00:00"}'
WHO = '"id":"a","timestamp":"2026-01-01T00:00:00+00:00",'
"""The identity every event read needs, for cases about other fields."""


def test_json_lines_and_array_give_the_same_events():
    lines = decode_events(GOOD + "\n\n" + GOOD.replace('"a"', '"b"') + "\n")
    array = decode_events("[" + GOOD + "," + GOOD.replace('"a"', '"b"') + "]")
    assert [e.id for e in lines] == ["a", "b"]
    assert lines == array


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        (GOOD + "\n{not json", 2, None, "not JSON"),
        (GOOD + '\n{"kind":"telepathy","source":"user"}', 2, "kind", "unknown kind 'telepathy'"),
        ('{"source":"user"}', 1, "kind", "missing field"),
        (
            "{"
            + WHO
            + '"kind":"action","source":"agent","tool_call_id":"c","tool_name":"t","raw_arguments":"{}"}',
            1,
            "llm_response_id",
            "missing field",
        ),
        ("{" + WHO + '"kind":"message","source":"user","text":5}', 1, "text", "string"),
        ("{" + WHO + '"kind":"message","source":"robot","text":"x"}', 1, "source", "robot"),
        (
            "{" + WHO + '"kind":"message","source":"user","text":"x","colour":"red"}',
            1,
            "colour",
            "unknown field",
        ),
        ("[1]", 1, None, "expected a JSON object"),
    ],
)
def test_bad_input_names_line_and_field(text, line, field, words):
    with pytest.raises(EventDecodeError) as caught:
        decode_events(text)
    assert caught.value.line == line
    assert caught.value.field == field
    assert words in str(caught.value)


# -- hostile lines (issue 10, items 10 and 11) ----------------------------------------------

BASE = '{"kind":"state_change","key":"k",' + WHO


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (BASE + '"value":' + "[" * 600 + "]" * 600 + "}", "value", "at most 200 levels"),
        (BASE + '"value":[' + "7" * 4400 + "]}", "value.0", "more than 4300 digits"),
        (BASE + '"value":{"v":NaN}}', "value.v", "NaN"),
        (BASE + '"value":-Infinity}', "value", "Infinity"),
        (BASE + '"value":"\\ud800"}', "value", "lone surrogate"),
        ('{"kind":"pause","timestamp":"2026-01-01T00:00:00+00:00"}', "id", "missing field"),
        ('{"kind":"pause","id":"p"}', "timestamp", "missing field"),
    ],
)
def test_hostile_lines_name_their_line_and_field(text, field, words):
    with pytest.raises(EventDecodeError) as caught:
        decode_events(GOOD + "\n" + text + "\n")
    assert (caught.value.line, caught.value.field) == (2, field)
    assert words in str(caught.value)


def test_an_array_item_too_deep_is_named_by_its_number():
    deep = BASE + '"value":' + "[" * 250 + "]" * 250 + "}"
    with pytest.raises(EventDecodeError) as caught:
        decode_events("[" + GOOD + "," + deep + "]")
    assert (caught.value.line, caught.value.field) == (2, "value")


def test_a_byte_order_mark_is_skipped():
    assert [e.id for e in decode_events("\ufeff" + GOOD)] == ["a"]
