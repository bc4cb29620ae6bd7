"""A replay runs the recorded steps in runs as the recording did, not one run per step: a
rerun records the tools' isolation once per run (as a real run does at its start), so a
conversation run once is rerun with one ``isolation`` fact."""

from __future__ import annotations

from support.replays import FINISH, bash, recorded
from treadle.data.isolation import ISOLATION_KEY
from treadle.data.settings import SandboxSettings
from treadle.events.model import StateChangeEvent
from treadle.runtime.replay.rerun_mode import rerun

NO_SANDBOX = {"sandbox": {"kind": "none"}}
ALLOW_NONE = SandboxSettings(kind="none")
"""What ``--sandbox none`` allows: a rerun may run as unconfined as its recording."""


def isolation_facts(store, conversation_id):
    return [
        item.event.value
        for item in store.get_range(conversation_id, 0, 10**6)
        if isinstance(item.event, StateChangeEvent) and item.event.key == ISOLATION_KEY
    ]


def test_a_rerun_records_its_isolation_once_per_run_as_the_recording(store, workspace, tmp_path):
    steps = [bash("echo one"), bash("echo two"), bash("echo three"), FINISH]
    once = recorded(store, workspace, steps, **NO_SANDBOX)
    assert len(isolation_facts(store, once)) == 1
    report = rerun(store, once, workspace=workspace, into=tmp_path / "once", allowed=ALLOW_NONE)
    assert report.same
    (fact,) = isolation_facts(store, report.new_conversation)
    assert fact["sandbox"] == "none"

    twice = recorded(
        store,
        workspace,
        [*steps, bash("echo four"), FINISH],
        messages=("go", "more"),
        **NO_SANDBOX,
    )
    assert len(isolation_facts(store, twice)) == 2
    report = rerun(store, twice, workspace=workspace, into=tmp_path / "twice", allowed=ALLOW_NONE)
    assert report.same
    assert len(isolation_facts(store, report.new_conversation)) == 2
