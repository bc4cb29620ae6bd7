"""The shape of an OpenHands SDK conversation folder, learnt from the committed SDK fixtures, and
the check that a folder Treadle wrote has it (CI has no SDK to load the folder with).

What the SDK itself wrote (tests/fixtures/openhands) defines, per event kind, the keys that are
always there and those that may be; a folder passes when its ``base_state.json`` and every event
file fit that shape, files are numbered and named as the SDK names them, and every link (parent,
answered call, head) points at an event of the folder. The committed fixtures pass it too.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from support.openhands_folders import FIXTURES

ROOT_PARENT = "__root__"
SDK_DEFAULTED = {"ActionEvent": frozenset({"security_risk"})}
"""Keys the SDK's fixtures always hold but whose SDK field has a default (Treadle leaves
``security_risk`` out when it knows none: the SDK reads UNKNOWN)."""
PLAIN_OBSERVATION = "ClientToolObservation"
"""The SDK's plain observation class, which Treadle writes for results of its own tools."""
SOURCES = frozenset({"agent", "user", "environment"})
_FILE_NAME = re.compile(r"event-(\d{5})-(.+)\.json")


@dataclass
class Shape:
    always: dict[str, set[str]] = field(default_factory=dict)
    allowed: dict[str, set[str]] = field(default_factory=dict)
    observation_keys: dict[str, set[str]] = field(default_factory=dict)
    base_state_always: set[str] = field(default_factory=set)
    base_state_allowed: set[str] = field(default_factory=set)


@functools.cache
def sdk_shape() -> Shape:
    """Keys per kind (and per observation kind), and of ``base_state.json``, in the fixtures."""
    shape = Shape()
    states = [_read(path) for path in FIXTURES.rglob("base_state.json")]
    shape.base_state_always = set.intersection(*(set(state) for state in states))
    shape.base_state_allowed = set.union(*(set(state) for state in states))
    for path in FIXTURES.rglob("events/event-*.json"):
        event = _read(path)
        kind, keys = event["kind"], set(event)
        shape.always[kind] = shape.always.get(kind, keys) & keys
        shape.allowed.setdefault(kind, set()).update(keys)
        if kind == "ObservationEvent":
            observation = event["observation"]
            shape.observation_keys.setdefault(observation["kind"], set()).update(observation)
    # The plain class has the fields every observation has (the base Observation's).
    shape.observation_keys[PLAIN_OBSERVATION] = set.intersection(*shape.observation_keys.values())
    return shape


def sdk_format_problems(folder: Path) -> list[str]:
    """What in ``folder`` does not fit the shape of the SDK's own folders (empty: it fits)."""
    shape = sdk_shape()
    problems: list[str] = []
    state = _read(folder / "base_state.json")
    problems += _keys(
        "base_state.json", set(state), shape.base_state_always, shape.base_state_allowed
    )
    events: dict[str, dict[str, Any]] = {}
    files = sorted((folder / "events").iterdir())
    for number, path in enumerate(files):
        match = _FILE_NAME.fullmatch(path.name)
        if match is None or int(match.group(1)) != number:
            problems.append(f"{path.name}: not event-{number:05d}-<id>.json")
        event = _read(path)
        if match is not None and event.get("id") != match.group(2):
            problems.append(f"{path.name}: its id is {event.get('id')!r}")
        if event.get("id") in events:
            problems.append(f"{path.name}: id {event['id']} twice")
        events[event.get("id", path.name)] = event
        problems += _event_problems(path.name, event, shape)
    calls = {e["tool_call_id"] for e in events.values() if e.get("kind") == "ActionEvent"}
    for name, event in ((e["id"], e) for e in events.values()):
        parent = event.get("parent_id")
        if parent not in (None, ROOT_PARENT) and parent not in events:
            problems.append(f"event {name}: parent {parent} is not in the folder")
        answers = event.get("kind") in (
            "ObservationEvent",
            "AgentErrorEvent",
            "UserRejectObservation",
        )
        if answers and event.get("tool_call_id") not in calls:
            problems.append(f"event {name}: answers call {event.get('tool_call_id')}, not made")
    leaf = state.get("leaf_event_id")
    if leaf is not None and leaf not in events:
        problems.append(f"base_state.json: leaf_event_id {leaf} is not in the folder")
    return problems


def _event_problems(name: str, event: dict[str, Any], shape: Shape) -> list[str]:
    kind = event.get("kind")
    if kind not in shape.allowed:
        return [f"{name}: kind {kind!r} is not one the SDK writes"]
    problems = _keys(
        f"{name} ({kind})",
        set(event),
        shape.always[kind] - SDK_DEFAULTED.get(kind, frozenset()),
        shape.allowed[kind],
    )
    if event.get("source") not in SOURCES:
        problems.append(f"{name}: source {event.get('source')!r}")
    try:
        datetime.fromisoformat(event.get("timestamp", ""))
    except (TypeError, ValueError):
        problems.append(f"{name}: timestamp {event.get('timestamp')!r} is not ISO 8601")
    if kind == "ObservationEvent":
        observation = event.get("observation") or {}
        allowed = shape.observation_keys.get(observation.get("kind"))
        if allowed is None:
            problems.append(f"{name}: observation kind {observation.get('kind')!r} is unknown")
        elif set(observation) - allowed:
            problems.append(f"{name}: observation keys {sorted(set(observation) - allowed)}")
    return problems


def _keys(where: str, keys: set[str], always: set[str], allowed: set[str]) -> list[str]:
    problems = []
    if always - keys:
        problems.append(f"{where}: lacks {sorted(always - keys)}")
    if keys - allowed:
        problems.append(f"{where}: has keys the SDK never writes {sorted(keys - allowed)}")
    return problems


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
