"""REPLAY-RERUN with the real tools: a fresh workspace from the first snapshot (or a folder of
starting files), a new conversation linked to the original, which stays byte for byte as it
was; a non-idempotent command diverges on exactly its action; rejected calls stay unrun; the
tools run under the recorded isolation (bubblewrap when it ran sandboxed)."""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from support.processes import host_pids_with
from support.replays import FINISH, bash, call, calls, raw_rows, recorded
from support.waiting import wait_until
from treadle.data.isolation import ISOLATION_KEY
from treadle.data.settings import SandboxLimits, SandboxSettings
from treadle.events.model import ActionEvent, StateChangeEvent
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.replay import ReplayInputError, replay_recorded
from treadle.runtime.replay.rerun_mode import REPLAY_KEY, WORKSPACE_MARK, no_weaker, rerun
from treadle.runtime.snapshots import open_snapshot_store
from treadle.runtime.workspace import check_bubblewrap, seccomp
from treadle.store.urls import open_store

NO_SANDBOX = {"sandbox": {"kind": "none"}}


def facts(store, conversation_id, key):
    return [
        item.event.value
        for item in store.get_range(conversation_id, 0, 10**6)
        if isinstance(item.event, StateChangeEvent) and item.event.key == key
    ]


def action_of(store, conversation_id, command):
    path = store.path_to_root(conversation_id, store.head(conversation_id))
    return next(
        e
        for e in path
        if isinstance(e, ActionEvent) and (e.arguments or {}).get("command") == command
    )


def files_of(folder):
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_a_clock_read_diverges_on_that_action_only_and_the_original_is_untouched(
    store, store_file, workspace, tmp_path
):
    (workspace / "notes.txt").write_text("first line\n")
    clock = "date +%s%N"
    responses = [
        bash("cat notes.txt; pwd"),
        bash(clock),
        calls(
            call("file_editor", {"command": "view", "path": "notes.txt"}),
            call("think", {"thought": "ok"}),
        ),
        bash("echo second line >> notes.txt"),
        FINISH,
    ]
    conversation = recorded(store, workspace, responses, **NO_SANDBOX)
    (workspace / "notes.txt").write_text("changed by hand since\n")  # not the starting files
    before = raw_rows(store_file, conversation)
    workspace_before = files_of(workspace)
    objects = open_snapshot_store(store)
    kept_before = objects.kept(conversation)

    report = rerun(store, conversation, into=tmp_path / "rerun")

    (divergence,) = report.divergences
    date_action = action_of(store, conversation, clock)
    assert divergence.contract == "REPLAY-RERUN"
    assert divergence.action_id == date_action.id
    assert divergence.tool_call_id == date_action.tool_call_id
    assert divergence.tool == "terminal"
    assert divergence.fields == ["content"]
    assert [check.action_id for check in report.actions if not check.same] == [date_action.id]
    assert len(report.actions) == 6
    assert sum(check.same for check in report.actions) == 5
    # The rerun started from the recorded first snapshot, not from the files as they are now,
    # and ended with the files the recording ended with.
    assert (tmp_path / "rerun" / "notes.txt").read_text() == "first line\nsecond line\n"
    assert report.file_changes == []
    assert report.starting_files.startswith("snapshot ")
    # A new conversation linked to the original; the original is byte for byte as it was.
    new = store.get_conversation(report.new_conversation)
    assert new.metadata["origin"] == {
        "replay_of": conversation,
        "event_id": report.head,
        "mode": "rerun",
    }
    started, done = facts(store, report.new_conversation, REPLAY_KEY)
    assert started["of"] == conversation
    assert started["phase"] == "started"
    assert done == {
        "phase": "done",
        "same": False,
        "divergent_actions": (date_action.id,),  # frozen JSON: lists read back as tuples
        "file_changes": 0,
    }
    assert raw_rows(store_file, conversation) == before
    assert files_of(workspace) == workspace_before
    assert objects.kept(conversation) == kept_before


def test_a_counter_outside_the_workspace_diverges_on_that_action_and_in_the_files(
    store, workspace, tmp_path
):
    counter = tmp_path / "counter"  # outside the workspace: no snapshot puts it back
    counter.write_text("0\n")
    bump = f"n=$(cat {counter}); echo $((n+1)) > {counter}; cat {counter} | tee count.txt"
    responses = [bash("echo steady"), bash(bump), bash("echo steady again"), FINISH]
    conversation = recorded(store, workspace, responses, **NO_SANDBOX)
    assert counter.read_text() == "1\n"

    # --sandbox none: the counter is outside the workspace, which a sandbox would not show.
    report = rerun(
        store, conversation, into=tmp_path / "rerun", allowed=SandboxSettings(kind="none")
    )

    bump_action = action_of(store, conversation, bump)
    (divergence,) = report.divergences
    assert divergence.action_id == bump_action.id
    assert "1" in divergence.expected["content"]
    assert "2" in divergence.actual["content"]
    assert report.file_changes == [{"status": "M", "path": "count.txt"}]
    assert counter.read_text() == "2\n"  # it really ran again


def test_results_that_name_the_workspace_folder_compare_without_it(store, workspace, tmp_path):
    conversation = recorded(store, workspace, [bash("pwd; ls -d $PWD"), FINISH], **NO_SANDBOX)
    report = rerun(store, conversation, into=tmp_path / "elsewhere")
    assert report.same, report.divergences  # each folder read as WORKSPACE_MARK

    def first_output(conversation_id):
        path = store.path_to_root(conversation_id, store.head(conversation_id))
        return next(e.content for e in path if e.kind == "observation")

    assert str(workspace) in first_output(conversation)
    assert str(tmp_path / "elsewhere") in first_output(report.new_conversation)
    assert WORKSPACE_MARK not in first_output(report.new_conversation)


def test_replays_leave_no_process_thread_file_or_folder_behind(workspace, tmp_path, monkeypatch):
    """On a store of the test's own, closed at the end: SQLite keeps the descriptor of a
    thread's connection that closed while another connection of the process held a lock on
    the file, until the file's last connection closes (reused meanwhile, so bounded). Every
    descriptor is back once the store is closed; none of the store's files stays open."""
    store_file = tmp_path / "replays.db"
    store = open_store(f"sqlite:///{store_file}")
    marker = f"replay-marker-{tmp_path.name}"
    temp = tmp_path / "tmp"  # a temp folder of this test's own: others' replays are not counted
    temp.mkdir()
    try:
        conversation = recorded(
            store, workspace, [bash(f"echo {marker}"), bash("sleep 0.1"), FINISH], **NO_SANDBOX
        )
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        monkeypatch.setenv("TMPDIR", str(temp))
        folders = set(temp.glob("treadle-replay-*"))
        gc.collect()  # what the recording's run left to the collector is not the replays'
        seccomp.filter_file()  # the sandbox's one sealed filter per process, made at first use
        fds = _fd_targets(ignoring=store_file)
        threads = threading.active_count()

        assert replay_recorded(store, conversation).same
        assert rerun(store, conversation, into=tmp_path / "rerun").same

        assert set(temp.glob("treadle-replay-*")) == folders  # the replay's temporary store
        wait_until(lambda: threading.active_count() <= threads, what="the replays' threads ended")
    finally:
        store.close()
    # Polled: a thread that is ending (a shell's reader) closes its descriptor as it goes.
    deadline = time.monotonic() + 30
    while True:
        gc.collect()
        opened = _fd_targets(ignoring=store_file) - fds
        kept = [target for _fd, target in _fd_targets() if target.startswith(str(store_file))]
        if (not opened and not kept) or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    assert not opened, f"descriptors the replays left open: {sorted(opened)}"
    assert not kept, f"the closed store's files still open: {kept}"
    wait_until(
        lambda: not [pid for pid in host_pids_with("bash") if _in(pid, tmp_path / "rerun")],
        what="the rerun's terminal sessions closed",
    )


def _fd_targets(ignoring: Path | None = None) -> set[tuple[str, str]]:
    """This process's open descriptors, each with what it leads to (a new one shows what);
    ``ignoring``: leave out those of that file and its -wal and -shm companions."""
    targets = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own among them)
            targets.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
    if ignoring is not None:
        targets = {(fd, t) for fd, t in targets if not t.startswith(str(ignoring))}
    return targets


def _in(pid: int, folder: Path) -> bool:
    """The process works in ``folder`` (a terminal session of the rerun's workspace)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd").startswith(str(folder))
    except OSError:
        return False


def test_rejected_calls_stay_unrun_and_confirmed_ones_run(store, workspace, tmp_path):
    responses = [
        calls(
            call("terminal", {"command": "touch rejected.txt"}),
            call("terminal", {"command": "touch confirmed.txt"}),
        ),
        FINISH,
    ]

    def decide(conversation):
        pending = conversation.pending_actions()
        if len(pending) == 2:
            conversation.reject([pending[0].id])
        conversation.confirm()

    conversation = recorded(
        store,
        workspace,
        responses,
        decide=decide,
        confirmation=ConfirmationPolicy.ALWAYS,
        **NO_SANDBOX,
    )
    report = rerun(store, conversation, into=tmp_path / "rerun")
    assert report.same, report.divergences
    assert (tmp_path / "rerun" / "confirmed.txt").exists()
    assert not (tmp_path / "rerun" / "rejected.txt").exists()
    kinds = [
        e.kind
        for e in store.path_to_root(report.new_conversation, store.head(report.new_conversation))
    ]
    assert "user_rejection" in kinds


def test_without_a_first_snapshot_the_starting_files_must_be_given(store, workspace, tmp_path):
    (workspace / "data.txt").write_text("input\n")
    conversation = recorded(
        store, workspace, [bash("cat data.txt"), FINISH], snapshots=False, **NO_SANDBOX
    )
    count = len(store.list_conversations())
    with pytest.raises(ReplayInputError, match="give --workspace DIR with the starting files"):
        rerun(store, conversation, into=tmp_path / "refused")
    assert len(store.list_conversations()) == count  # nothing was made
    assert not (tmp_path / "refused").exists()

    starting = tmp_path / "starting"
    starting.mkdir()
    (starting / "data.txt").write_text("input\n")
    report = rerun(store, conversation, workspace=starting, into=tmp_path / "rerun")
    assert report.same, report.divergences
    assert report.starting_files == f"workspace {starting}"
    assert report.file_changes is None  # no recorded snapshot to compare with
    assert files_of(starting) == {"data.txt": b"input\n"}  # copied, not used


def test_a_rerun_needs_a_folder_of_its_own(store, workspace, tmp_path):
    conversation = recorded(store, workspace, [FINISH], **NO_SANDBOX)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "something").write_text("x")
    with pytest.raises(ReplayInputError, match="absent or empty"):
        rerun(store, conversation, into=taken)


def test_a_sandboxed_conversation_is_rerun_in_the_sandbox(store, workspace, tmp_path):
    try:
        check_bubblewrap()
    except Exception as problem:  # CI installs bubblewrap (make test)
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    responses = [bash("echo $HOME; echo made > made.txt"), bash("date +%s%N"), FINISH]
    conversation = recorded(store, workspace, responses)  # the default: bubblewrap
    assert facts(store, conversation, ISOLATION_KEY)[-1]["sandbox"] == "bubblewrap"

    report = rerun(store, conversation, into=tmp_path / "rerun")

    (divergence,) = report.divergences
    assert divergence.action_id == action_of(store, conversation, "date +%s%N").id
    isolation = facts(store, report.new_conversation, ISOLATION_KEY)  # one per step
    assert isolation
    assert all(fact["sandbox"] == "bubblewrap" and fact["network"] == "off" for fact in isolation)
    assert (tmp_path / "rerun" / "made.txt").read_text() == "made\n"
    first = store.path_to_root(report.new_conversation, store.head(report.new_conversation))
    assert "/home/sandbox" in next(e.content for e in first if e.kind == "observation")


def test_a_rerun_up_to_an_earlier_head_compares_with_the_files_there(store, workspace, tmp_path):
    responses = [bash("echo one > a.txt"), bash("echo two >> a.txt"), FINISH]
    conversation = recorded(store, workspace, responses, **NO_SANDBOX)
    path = store.path_to_root(conversation, store.head(conversation))
    first_result = next(e for e in path if e.kind == "observation")

    report = rerun(store, conversation, first_result.id, into=tmp_path / "rerun")

    assert report.same, report.divergences
    assert [check.tool_call_id for check in report.actions] == ["call-0-0"]
    assert report.file_changes == []  # against the snapshot covering that head: a.txt = one
    assert (tmp_path / "rerun" / "a.txt").read_text() == "one\n"
    assert (workspace / "a.txt").read_text() == "one\ntwo\n"


def test_no_weaker_raises_a_recordings_isolation_to_what_the_command_allows():
    """A log may come from anywhere: what it recorded is no permission (the rule, whole)."""
    none, sandboxed = SandboxSettings(kind="none"), SandboxSettings()
    assert no_weaker(none, none) == (none, None)  # --sandbox none allows it
    raised, why = no_weaker(none, sandboxed)
    assert raised == sandboxed
    assert why is not None
    assert "--sandbox none" in why
    networked = SandboxSettings(network="on", mounts_ro=("/opt",))
    raised, why = no_weaker(networked, sandboxed)
    # A host path the log mounted is no permission either: dropped unless the command lists it.
    assert raised == SandboxSettings()
    assert why is not None
    assert "network on" in why
    assert "--network" in why
    assert "/opt" in why
    assert "--mount-ro" in why
    allowing_opt = SandboxSettings(mounts_ro=("/opt",))
    raised, why = no_weaker(networked, allowing_opt)
    assert raised == networked.model_copy(update={"network": "off"})  # the listed mount kept
    assert why is not None
    assert "/opt" not in why
    lifted = SandboxSettings(limits=SandboxLimits(memory_mib=None, processes=100_000))
    raised, why = no_weaker(lifted, sandboxed)
    assert raised.limits == SandboxLimits()  # each limit back within the command's
    assert why is not None
    assert "memory_mib None" in why
    assert "processes 100000" in why
    tighter = SandboxSettings(limits=SandboxLimits(memory_mib=512))
    assert no_weaker(tighter, sandboxed) == (tighter, None)  # stricter than allowed: kept
    listed = SandboxSettings(network="allow=pypi.org")
    assert no_weaker(listed, SandboxSettings(network="allow=pypi.org,example.com")) == (
        listed,
        None,
    )
    raised, why = no_weaker(listed, SandboxSettings(network="allow=example.com"))
    assert raised.network == "allow=example.com"
    assert why is not None
    assert "pypi.org" in why
    assert no_weaker(networked, SandboxSettings(network="on", mounts_ro=("/opt",))) == (
        networked,
        None,
    )


def test_an_unsandboxed_recording_is_rerun_in_the_sandbox_unless_allowed(
    store, workspace, tmp_path
):
    try:
        check_bubblewrap()
    except Exception as problem:  # CI installs bubblewrap (make test)
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    conversation = recorded(store, workspace, [bash("echo $HOME"), FINISH], **NO_SANDBOX)
    assert facts(store, conversation, ISOLATION_KEY)[-1]["sandbox"] == "none"

    report = rerun(store, conversation, into=tmp_path / "raised")

    (started, _done) = facts(store, report.new_conversation, REPLAY_KEY)
    assert "recorded without a sandbox" in started["isolation_raised"]
    isolation = facts(store, report.new_conversation, ISOLATION_KEY)
    assert isolation
    assert all(fact["sandbox"] == "bubblewrap" for fact in isolation)
    first = store.path_to_root(report.new_conversation, store.head(report.new_conversation))
    assert "/home/sandbox" in next(e.content for e in first if e.kind == "observation")

    allowed = rerun(
        store, conversation, into=tmp_path / "as-recorded", allowed=SandboxSettings(kind="none")
    )
    (started, _done) = facts(store, allowed.new_conversation, REPLAY_KEY)
    assert "isolation_raised" not in started
    assert facts(store, allowed.new_conversation, ISOLATION_KEY)[-1]["sandbox"] == "none"
