"""The benchmarks' synthetic log (treadle.bench.workload) is one a model could have produced:
unique call ids across pieces and seeds, a clean audit, so that audit figures are not figures
of a log full of violations."""

from __future__ import annotations

import itertools

from treadle.bench.workload import realistic_chunks, realistic_events
from treadle.events.audit import audit_events
from treadle.events.model import ActionEvent


def test_chunks_form_one_chain_with_a_clean_audit() -> None:
    chunks = list(realistic_chunks(5000, 333, seed=3))
    assert [len(chunk) for chunk in chunks] == [333] * 15 + [5]
    events = [event for chunk in chunks for event in chunk]
    assert all(event.parent_id == before.id for before, event in itertools.pairwise(events))
    report = audit_events(events)
    assert report.violations == []
    assert report.heads == [events[-1].id]


def test_call_ids_are_unique_across_seeds() -> None:
    calls = [
        event.tool_call_id
        for seed in (1, 2, 3)
        for event in realistic_events(3000, seed=seed)
        if isinstance(event, ActionEvent)
    ]
    assert len(calls) > 1000
    assert len(set(calls)) == len(calls)
