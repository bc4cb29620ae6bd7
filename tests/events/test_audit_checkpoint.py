"""An audit restored from its checkpoint answers as a full audit of the same events, however
the log is cut and whatever it is extended by afterwards (random logs with branches, forks,
new roots, legacy parents, broken links); a checkpoint that is not one is refused."""

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.test_audit_incremental import logs
from treadle.events.audit import IncrementalAudit, audit_events
from treadle.events.audit_checkpoint import CheckpointError
from treadle.events.audit_facts import AuditFacts, facts_of
from treadle.events.model import EventBase


class ListSource:
    """A FactsSource over a list of records; counts what the restored audit asked for."""

    def __init__(self, facts: list[AuditFacts]) -> None:
        self.records = facts
        self.read = 0

    def facts(self, start: int, end: int) -> Sequence[AuditFacts]:
        self.read += end - start
        return self.records[start:end]

    def positions(self, ids: Sequence[str], end: int) -> dict[str, int]:
        found: dict[str, int] = {}
        for position, facts in enumerate(self.records[:end]):
            if facts.id in ids:
                found.setdefault(facts.id, position)
        return found


def heads_of(prefix: list[EventBase]) -> list[str | None]:
    ids = [event.id for event in prefix]
    return [None, "not-an-event", *ids[-3:], *ids[:2], *ids[len(ids) // 2 : len(ids) // 2 + 2]]


@settings(max_examples=300, deadline=None)
@given(log=logs(), data=st.data())
def test_restored_audit_equals_auditing_the_whole_log(
    log: list[EventBase], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(log)), max_size=4)))
    facts = [facts_of(event) for event in log]
    audit = IncrementalAudit(facts[: cuts[0]] if cuts else facts)
    done = len(audit)
    for cut in [*cuts[1:], len(log)]:
        data_bytes = audit.checkpoint()
        if data_bytes is not None:  # a clean tree: restore it in a "fresh process"
            audit = IncrementalAudit.restore(data_bytes, ListSource(facts[:done]))
            prefix = log[:done]
            for head in heads_of(prefix):
                assert audit.report(head) == audit_events(prefix, head=head), (done, head)
        audit.extend(facts[done:cut])
        done = cut
        prefix = log[:done]
        for head in heads_of(prefix):
            assert audit.report(head) == audit_events(prefix, head=head), (done, head)


def test_a_restored_audit_reads_only_what_the_tail_needs() -> None:
    from treadle.bench.workload import realistic_events

    log = realistic_events(3000, seed=3)
    facts = [facts_of(event) for event in log]
    data = IncrementalAudit(facts[:2990]).checkpoint()
    assert data is not None
    source = ListSource(facts)
    restored = IncrementalAudit.restore(data, source)
    restored.extend(facts[2990:])
    assert restored.report() == audit_events(log)
    assert source.read < 50


@pytest.mark.parametrize("damage", [b"", b"not a checkpoint", "truncated", "format"])
def test_bytes_that_are_no_checkpoint_are_refused(damage: object) -> None:
    data = IncrementalAudit([]).checkpoint()
    assert data is not None
    if damage == "truncated":
        bad = data[:-3] + b"\x00"
    elif damage == "format":
        bad = data.replace(b'"format":1', b'"format":9')
    else:
        assert isinstance(damage, bytes)
        bad = damage
    with pytest.raises(CheckpointError):
        IncrementalAudit.restore(bad, ListSource([]))
