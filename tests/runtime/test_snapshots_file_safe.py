"""Batches of file-safe calls (think, finish, task_tracker: ``Tool.changes_files`` False) record
no snapshot, and a restore to any event in them still finds the snapshot before them; a batch
with a tool that may change files still records one; files changed by hand between runs are read
at the next run's first batch."""

from __future__ import annotations

from treadle.events.model import ActionEvent, ObservationEvent
from treadle.runtime.snapshots import SNAPSHOT_KEY, batch_diff, covering_snapshot
from treadle.runtime.status import ConversationStatus as Status

from .test_snapshots import FINISH, bash, call, create, edit, facts, results

THINK_TWICE = {
    "tool_calls": [
        call("think", {"thought": "first"}),
        call("think", {"thought": "second"}),
    ]
}


def test_a_think_only_batch_records_no_snapshot_yet_a_restore_into_it_works(store, workspace):
    with create(
        store,
        workspace,
        [
            edit("create", "a.txt", file_text="one\n"),
            THINK_TWICE,
            edit("str_replace", "a.txt", old_str="one", new_str="two"),
            FINISH,
        ],
    ) as conv:
        conv.send_message("go")
        assert conv.run() is Status.FINISHED
        first_think, second_think = [
            e for e in results(conv) if isinstance(e, ObservationEvent) and e.tool_name == "think"
        ]
        recorded = facts(store, conv.id, SNAPSHOT_KEY)
        after_events = [value["after_event"] for value in recorded]
        # The first event, the create and the replace: nothing after think or finish.
        assert len(recorded) == 3
        assert first_think.id not in after_events
        assert second_think.id not in after_events
        created = results(conv)[0]
        assert recorded[1]["after_event"] == created.id
        # Between the two think results (and after them) the create's snapshot covers.
        for event in (first_think, second_think):
            assert covering_snapshot(store, conv.id, event.id).id == recorded[1]["id"]
        assert (workspace / "a.txt").read_text() == "two\n"
        restored = conv.switch_branch(first_think.id, restore_files=True)
        assert restored is not None
        assert restored.changed == ["a.txt"]
        assert (workspace / "a.txt").read_text() == "one\n"
        # The Files view of the think batch: nothing changed (not the later replace's diff).
        think_action = next(
            e for e in conv.active_path() if isinstance(e, ActionEvent) and e.tool_name == "think"
        )
        files = batch_diff(store, conv.snapshots.objects, conv.id, think_action.id)
        assert (files.changed, files.diff) == ([], "")
        assert files.snapshot_a == files.snapshot_b == recorded[1]["id"]


def test_a_batch_with_a_tool_that_may_change_files_records_a_snapshot(store, workspace):
    mixed = {
        "tool_calls": [
            call("think", {"thought": "write it"}),
            call("terminal", {"command": "echo c > c.txt"}),
        ]
    }
    with create(store, workspace, [mixed, FINISH]) as conv:
        conv.send_message("go")
        conv.run()
        terminal = next(e for e in results(conv) if e.tool_name == "terminal")
        recorded = facts(store, conv.id, SNAPSHOT_KEY)
        assert [value["after_event"] for value in recorded][-1] == terminal.id
        assert recorded[-1]["changed"] == ("c.txt",)
        # The finish batch after it records none: the terminal's batch's snapshot covers it.
        finish = conv.active_path()[-1]
        assert covering_snapshot(store, conv.id, finish.id).id == recorded[-1]["id"]


def test_files_changed_by_hand_between_runs_are_read_at_the_next_think_batch(store, workspace):
    with create(store, workspace, [bash("echo b > b.txt"), FINISH, THINK_TWICE, FINISH]) as conv:
        conv.send_message("go")
        assert conv.run() is Status.FINISHED
        before = facts(store, conv.id, SNAPSHOT_KEY)
        (workspace / "by_hand.txt").write_text("written between runs\n")
        conv.send_message("think about it")
        assert conv.run() is Status.FINISHED
        last_think = [e for e in results(conv) if e.tool_name == "think"][-1]
        (read_again,) = facts(store, conv.id, SNAPSHOT_KEY)[len(before) :]
        assert read_again["changed"] == ("by_hand.txt",)
        assert read_again["id"] != before[-1]["id"]
        # A restore to the think batch puts back the files as they were then, hand edit included.
        assert covering_snapshot(store, conv.id, last_think.id).id == read_again["id"]
