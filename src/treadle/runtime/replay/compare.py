"""Comparing a replay with its recording: the two paths aligned event by event (REPLAY-RECORDED),
and each recorded call's result against the rerun's (REPLAY-RERUN).

Ids differ between the two (a replay makes new events): events are paired by alignment, and a
link of the recording (``action_id``, ``forgotten_event_ids``) is translated through the pairs
before it is compared. ``parent_id`` is not compared field by field: on a path each event's
parent is the one before it, so the alignment checks it (a missing event is reported once, not
again on the event after it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from typing import Any

from treadle.events.model import ROOT, ActionEvent, Event
from treadle.events.projection import summary_id
from treadle.runtime.replay.recording import Result
from treadle.runtime.replay.report import ActionCheck, Divergence

RECORDED = "REPLAY-RECORDED"
RERUN = "REPLAY-RERUN"
NOT_COMPARED = ("id", "timestamp", "parent_id", "extra")
"""Identity and time differ by nature; ``extra`` holds imported fields no runtime writes."""
ADDED_LATER = ("trigger",)
"""Fields a log stored by an earlier Treadle lacks (a condensation's ``trigger``): compared only
when the recorded event has them."""
RESULT_FIELDS = (
    "kind",
    "tool_name",
    "content",
    "is_error",
    "data",
    "image_urls",
    "error",
    "interrupted",
    "reason",
)


def compare_paths(recorded: Sequence[Event], replayed: Sequence[Event]) -> list[Divergence]:
    """REPLAY-RECORDED: every difference between the two paths, in path order. (A head the
    user moved back into a batch, the replay moves again itself: the recording's ``hold``
    input.)"""
    keys_a = [_alignment_key(event) for event in recorded]
    keys_b = [_alignment_key(event) for event in replayed]
    pairs: list[tuple[int, int]] = []
    unpaired: list[tuple[float, Divergence]] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, keys_a, keys_b, autojunk=False).get_opcodes():
        common = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        if tag == "equal":
            common = i2 - i1
        pairs += [(i1 + k, j1 + k) for k in range(common)]
        for i in range(i1 + common, i2):
            unpaired.append((i, _missing(recorded, i)))
        for j in range(j1 + common, j2):
            unpaired.append((i1 + common - 0.5, _extra(recorded, replayed[j], i1 + common)))
    ids = {recorded[i].id: replayed[j].id for i, j in pairs}
    found = [
        (float(i), divergence)
        for i, j in pairs
        if (divergence := _field_divergence(recorded, i, replayed[j], ids)) is not None
    ]
    return [divergence for _, divergence in sorted(found + unpaired, key=lambda item: item[0])]


def _alignment_key(event: Event) -> tuple[Any, ...]:
    return (event.kind, event.source, getattr(event, "tool_call_id", None))


def _comparable(event: Event, ids: dict[str, str] | None = None) -> dict[str, Any]:
    """The event's fields as JSON without identity and time; links translated by ``ids``."""
    fields = {
        name: value
        for name, value in event.model_dump(mode="json").items()
        if name not in NOT_COMPARED
    }
    if ids is not None:
        if isinstance(fields.get("action_id"), str):
            fields["action_id"] = _translated(fields["action_id"], ids)
        if isinstance(fields.get("forgotten_event_ids"), list):
            fields["forgotten_event_ids"] = [
                _translated(value, ids) for value in fields["forgotten_event_ids"]
            ]
    return fields


def _translated(event_id: str, ids: dict[str, str]) -> str:
    if event_id == ROOT:
        return event_id
    if event_id in ids:
        return ids[event_id]
    # A condensation may forget an earlier one's summary, which has a derived id.
    for condensation, replayed in ids.items():
        if event_id == summary_id(condensation):
            return summary_id(replayed)
    return f"<recorded {event_id}, not in the replay>"


def _field_divergence(
    recorded: Sequence[Event], index: int, replayed: Event, ids: dict[str, str]
) -> Divergence | None:
    event = recorded[index]
    expected = _comparable(event, ids)
    actual = _comparable(replayed)
    names = sorted(
        name
        for name in expected.keys() | actual.keys()
        if expected.get(name) != actual.get(name)
        and not (name in ADDED_LATER and expected.get(name) is None)
    )
    if not names:
        return None
    return Divergence(
        contract=RECORDED,
        message=f"the replay's {replayed.kind} differs from the recorded {event.kind} in "
        f"{', '.join(names)}",
        event_id=event.id,
        replayed_event_id=replayed.id,
        **_call_of(event),
        kind=event.kind,
        fields=names,
        expected={name: expected.get(name) for name in names},
        actual={name: actual.get(name) for name in names},
        after_event_id=recorded[index - 1].id if index else None,
    )


def _missing(recorded: Sequence[Event], index: int) -> Divergence:
    event = recorded[index]
    return Divergence(
        contract=RECORDED,
        message=f"the replay has no event for the recorded {event.kind}",
        event_id=event.id,
        **_call_of(event),
        kind=event.kind,
        expected=_comparable(event),
        after_event_id=recorded[index - 1].id if index else None,
    )


def _extra(recorded: Sequence[Event], event: Event, before: int) -> Divergence:
    return Divergence(
        contract=RECORDED,
        message=f"the replay made a {event.kind} the recording does not have",
        replayed_event_id=event.id,
        action_id=None,
        tool_call_id=getattr(event, "tool_call_id", None),
        tool=getattr(event, "tool_name", None),
        kind=event.kind,
        actual=_comparable(event),
        after_event_id=recorded[before - 1].id if before > 0 else None,
    )


def _call_of(event: Event) -> dict[str, Any]:
    action_id = event.id if isinstance(event, ActionEvent) else getattr(event, "action_id", None)
    return {
        "action_id": action_id,
        "tool_call_id": getattr(event, "tool_call_id", None),
        "tool": getattr(event, "tool_name", None),
    }


def compare_results(
    recorded: Sequence[Event],
    recorded_results: dict[str, Result],
    replayed: Sequence[Event],
    normalize: Callable[[Any], Any],
) -> tuple[list[ActionCheck], list[Divergence]]:
    """REPLAY-RERUN: for each recorded call with a result, whether the rerun's result for the
    same call id is the same (``normalize`` applied to both: e.g. the workspace's folder)."""
    rerun_actions = {e.tool_call_id: e for e in replayed if isinstance(e, ActionEvent)}
    rerun_results: dict[str, Event] = {}
    for event in replayed:
        call = getattr(event, "tool_call_id", None)
        if call is not None and not isinstance(event, ActionEvent):
            rerun_results.setdefault(call, event)
    checks: list[ActionCheck] = []
    divergences: list[Divergence] = []
    for action in (e for e in recorded if isinstance(e, ActionEvent)):
        result = recorded_results.get(action.tool_call_id)
        if result is None:
            continue  # never answered on the recorded path: nothing to compare with
        rerun_action = rerun_actions.get(action.tool_call_id)
        rerun_result = rerun_results.get(action.tool_call_id)
        expected = normalize(_result_fields(result))
        actual = None if rerun_result is None else normalize(_result_fields(rerun_result))
        same = actual == expected
        checks.append(
            ActionCheck(
                action.id,
                action.tool_call_id,
                action.tool_name,
                same,
                rerun_action.id if rerun_action else None,
            )
        )
        if same:
            continue
        names = (
            sorted(expected)
            if actual is None
            else sorted(
                name
                for name in expected.keys() | actual.keys()
                if expected.get(name) != actual.get(name)
            )
        )
        divergences.append(
            Divergence(
                contract=RERUN,
                message=(
                    f"the rerun of call {action.tool_call_id} ({action.tool_name}) "
                    + ("gave no result" if actual is None else f"differs in {', '.join(names)}")
                ),
                event_id=result.id,
                replayed_event_id=rerun_result.id if rerun_result else None,
                action_id=action.id,
                tool_call_id=action.tool_call_id,
                tool=action.tool_name,
                kind=result.kind,
                fields=names,
                expected={name: expected.get(name) for name in names},
                actual=None if actual is None else {name: actual.get(name) for name in names},
            )
        )
    return checks, divergences


def _result_fields(event: Event) -> dict[str, Any]:
    fields = event.model_dump(mode="json")
    return {name: fields[name] for name in RESULT_FIELDS if name in fields}
