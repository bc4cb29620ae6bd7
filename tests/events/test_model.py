"""Event kinds: frozen, strict, discriminated on kind, lossless through JSON."""

import json

import pytest
from pydantic import ValidationError

from treadle.events.model import (
    EVENT_CLASSES,
    ROOT,
    ActionEvent,
    CondensationEvent,
    EventBase,
    ForeignEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
    event_from_dict,
    event_from_json,
    event_to_json,
    events_json_schema,
)


def make_action(**overrides):
    fields = {
        "llm_response_id": "r",
        "tool_call_id": "c1",
        "tool_name": "terminal",
        "arguments": {"command": "ls", "env": {"A": ["1", "2"]}},
        "raw_arguments": '{"command": "ls", "env": {"A": ["1", "2"]}}',
        "thought": "Looking around.",
    }
    fields.update(overrides)
    return ActionEvent(**fields)


def test_json_round_trip_is_lossless_for_every_kind():
    events = [
        MessageEvent(source="user", text="hi", parent_id=ROOT),
        make_action(parent_id="x"),
        ObservationEvent(
            action_id="a", tool_call_id="c1", tool_name="t", content="out", data={"exit_code": 0}
        ),
        CondensationEvent(forgotten_event_ids=("a", "b"), summary="s", summary_offset=1),
        StateChangeEvent(key="status", value={"now": "running", "history": [1, 2]}),
        ForeignEvent(
            source="environment", foreign_kind="HookEvent", payload={"x": [1, {"y": None}]}
        ),
        MessageEvent(
            source="user",
            text="imported",
            extra={"sender": "bob"},
            timestamp="2025-01-01T10:00:00.123",
        ),
    ]
    for event in events:
        text = event_to_json(event)
        again = event_from_json(text)
        assert again == event
        assert type(again) is type(event)
        assert event_to_json(again) == text


def test_nested_values_are_frozen():
    action = make_action()
    with pytest.raises(TypeError, match="frozen"):
        action.arguments["command"] = "rm -rf /"
    assert action.arguments["env"]["A"] == ("1", "2")  # lists became tuples
    with pytest.raises(ValidationError):
        action.tool_name = "other"  # the model itself is frozen


def test_unknown_fields_are_rejected():
    with pytest.raises(ValidationError, match="extra"):
        MessageEvent(source="user", text="x", colour="blue")


def test_discriminated_on_kind():
    event = event_from_dict(
        {"kind": "message", "source": "agent", "text": "done", "id": "m", "timestamp": "2026-01-01"}
    )
    assert isinstance(event, MessageEvent)
    assert event.role == "assistant"
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        event_from_dict({"kind": "telepathy", "source": "user"})


def test_root_marker_is_distinct_from_absent_parent():
    legacy = MessageEvent(source="user", text="x")
    root = MessageEvent(source="user", text="x", parent_id=ROOT)
    assert legacy.parent_id is None
    assert root.parent_id == ROOT
    assert "parent_id" not in json.loads(event_to_json(legacy))
    assert json.loads(event_to_json(root))["parent_id"] == ROOT


@pytest.mark.parametrize(
    ("fields", "contract"),
    [({"id": ROOT}, "TREE-PARENT"), ({"parent_id": ""}, "TREE-PARENT")],
)
def test_root_marker_and_empty_parent_are_refused(fields, contract):
    with pytest.raises(ValidationError, match=contract):
        MessageEvent(source="user", text="x", **fields)


def test_timestamps_written_in_utc_with_offset_and_imported_ones_kept_verbatim():
    written = MessageEvent(source="user", text="x")
    assert written.time.utcoffset() is not None
    assert written.timestamp.endswith("+00:00")
    imported = MessageEvent(source="user", text="x", timestamp="2025-03-01T12:00:00")
    assert imported.timestamp == "2025-03-01T12:00:00"
    assert imported.time.tzinfo is not None
    with pytest.raises(ValidationError, match="ISO 8601"):
        MessageEvent(source="user", text="x", timestamp="yesterday")


def test_action_keeps_unparseable_arguments_raw():
    action = make_action(arguments=None, raw_arguments='{"command": "ls"')
    assert event_from_json(event_to_json(action)).raw_arguments == '{"command": "ls"'
    assert action.arguments is None


def test_schema_covers_every_kind():
    schema = json.dumps(events_json_schema())
    for kind in (
        "message",
        "system_prompt",
        "action",
        "observation",
        "agent_error",
        "user_rejection",
        "condensation",
        "pause",
        "state_change",
        "foreign",
    ):
        assert f'"{kind}"' in schema


# -- what a reader requires (issue 10, item 11) ---------------------------------------------

SAMPLES = {"source": "user", "kind": None, "id": "e1", "timestamp": "2026-01-01T00:00:00+00:00"}
"""A value for each field some kind requires; other required fields are strings."""


def required_only(kind: str, required: list[str]) -> dict:
    return {name: kind if name == "kind" else SAMPLES.get(name, "x") for name in required}


@pytest.mark.parametrize("kind", sorted(EVENT_CLASSES))
def test_schema_marks_required_exactly_what_the_reader_requires(kind):
    definition = events_json_schema()["$defs"][EVENT_CLASSES[kind].__name__]
    required = definition["required"]
    assert {"kind", "id", "timestamp"} <= set(required)
    data = required_only(kind, required)
    event_from_json(json.dumps(data))  # the required fields are enough...
    event_from_dict(data)
    for name in required:  # ... and each one is needed, by both readers
        partial = {key: value for key, value in data.items() if key != name}
        with pytest.raises(ValidationError):
            event_from_json(json.dumps(partial))
        with pytest.raises(ValidationError):
            event_from_dict(partial)


def test_no_id_or_time_is_made_up_on_read_but_python_events_get_them():
    with pytest.raises(ValidationError, match="id"):
        event_from_dict({"kind": "pause", "timestamp": "2026-01-01"})
    with pytest.raises(ValidationError, match="timestamp"):
        event_from_json('{"kind": "pause", "id": "p"}')
    with pytest.raises(ValidationError, match="timestamp"):
        PauseEvent.model_validate({"id": "p"})
    first, second = PauseEvent(), PauseEvent()
    assert first.id != second.id
    assert first.time.tzinfo is not None
    kept = PauseEvent(id="p", timestamp="2026-01-01")
    assert (kept.id, kept.timestamp) == ("p", "2026-01-01")


def test_every_kind_shares_the_base_kind_declaration_without_reordering_its_json():
    """EventBase declares ``kind`` (so a type checker sees it on any event) as its last field:
    each subclass redeclares it first, so the order of fields, and the bytes of the JSON a
    store keeps, are those of the classes before the base declared it."""
    assert "kind" in EventBase.model_fields
    base = ["id", "source", "timestamp", "parent_id", "extra", "kind"]
    for kind, cls in EVENT_CLASSES.items():
        assert list(cls.model_fields)[: len(base)] == base, kind
        assert cls.model_fields["kind"].default == kind
    pause = PauseEvent(id="p", timestamp="2024-01-01T00:00:00+00:00")
    assert event_to_json(pause) == (
        '{"id":"p","source":"user","timestamp":"2024-01-01T00:00:00+00:00","extra":{},'
        '"kind":"pause"}'
    )
