"""A restore killed (SIGKILL) at a chosen point, in a child process: half of the files written,
or before the log said it started. The next open of the conversation leaves the workspace in
the new or the old state, and the log says which."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from treadle.events.model import StateChangeEvent
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings

FILES = 40

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from treadle.runtime.conversation import Conversation
    from treadle.runtime.log import ConversationLog
    from treadle.runtime.snapshots.gitstore import GitSnapshotStore
    from treadle.store.urls import open_store

    store_url, conversation_id, event_id, where = sys.argv[1:5]
    if where == "midway":  # the real checkout of half the files, then the kill
        checkout = GitSnapshotStore.checkout

        def half_then_die(self, work_tree, changes):
            checkout(self, work_tree, changes[: len(changes) // 2])
            os.kill(os.getpid(), signal.SIGKILL)

        GitSnapshotStore.checkout = half_then_die
    else:  # journal written, killed before the log says "started"
        record_fact = ConversationLog.record_fact

        def die_before_started(self, key, value, **options):
            if key == "restore" and value.get("phase") == "started":
                os.kill(os.getpid(), signal.SIGKILL)
            record_fact(self, key, value, **options)

        ConversationLog.record_fact = die_before_started
    store = open_store(store_url)
    Conversation.open(store, conversation_id).switch_branch(event_id, restore_files=True)
    """
)


def write_all(version: str) -> dict:
    command = f"mkdir -p d && for i in $(seq {FILES}); do echo {version}$i > d/f$i; done"
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


def contents(workspace):
    return {path.name: path.read_text() for path in (workspace / "d").iterdir()}


def version(number: str) -> dict:
    return {f"f{i}": f"{number}{i}\n" for i in range(1, FILES + 1)}


def restore_phases(store, conversation_id):
    return [
        (item.event.value["phase"], item.event.value.get("recovered"))
        for item in store.get_range(conversation_id, 0, 10**9)
        if isinstance(item.event, StateChangeEvent) and item.event.key == "restore"
    ]


def killed_restore(store, store_file, workspace, where: str):
    finish = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
    settings = ConversationSettings.scripted_inline(
        [write_all("old"), write_all("new"), finish], workspace
    )
    with Conversation.create(store, settings) as conv:
        conv.send_message("go")
        conv.run()
        first_batch = next(e for e in conv.active_path() if e.kind == "observation")
    assert contents(workspace) == version("new")
    child = subprocess.run(
        [sys.executable, "-c", CHILD, f"sqlite:///{store_file}", conv.id, first_batch.id, where],
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == -9, child.stderr
    return conv.id


def test_killed_halfway_through_the_files_the_next_start_finishes_the_restore(
    store, store_file, workspace
):
    conversation_id = killed_restore(store, store_file, workspace, "midway")
    halfway = contents(workspace)
    assert "old1\n" in halfway.values()
    assert f"new{FILES}\n" in halfway.values()  # really cut in the middle
    assert restore_phases(store, conversation_id) == [("started", None)]
    with Conversation.open(store, conversation_id):  # the next start
        pass
    assert contents(workspace) == version("old")  # the restore's target, every file
    assert restore_phases(store, conversation_id) == [("started", None), ("done", True)]
    with Conversation.open(store, conversation_id):  # nothing left to finish
        pass
    assert restore_phases(store, conversation_id) == [("started", None), ("done", True)]


def test_killed_before_the_log_said_started_the_next_start_rolls_back(store, store_file, workspace):
    conversation_id = killed_restore(store, store_file, workspace, "before")
    assert contents(workspace) == version("new")
    with Conversation.open(store, conversation_id):
        pass
    assert contents(workspace) == version("new")  # untouched: the old state
    assert restore_phases(store, conversation_id) == [("rolled_back", None)]


HOLD_LOCK = textwrap.dedent(
    """
    import fcntl, os, sys, time
    handle = os.open(sys.argv[1], os.O_RDWR)
    fcntl.flock(handle, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    """
)


def test_the_next_start_waits_for_a_restore_lock_still_held_by_a_going_process(
    store, store_file, workspace
):
    """What held the killed restore's lock may take a moment to go (a child of the killed
    process): the next start waits for it and finishes the restore, where it used to give up
    at once and leave the log saying "started" for good."""
    conversation_id = killed_restore(store, store_file, workspace, "midway")
    (lock,) = store_file.parent.glob("*.snapshots/restores/*.lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock), "1.5"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"  # held before the next start begins
        with Conversation.open(store, conversation_id):
            pass
    finally:
        holder.wait(timeout=30)
    assert contents(workspace) == version("old")
    assert restore_phases(store, conversation_id) == [("started", None), ("done", True)]
