"""Workspace snapshots through the real tools, a real SQLite store and real git: the seed's
counterexample, changes made by bash, deleted and ignored files, forks into a new workspace,
the undo of a restore."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from treadle.events.model import AgentErrorEvent, ObservationEvent, StateChangeEvent
from treadle.runtime.conversation import Conversation
from treadle.runtime.errors import ForkNeedsWorkspace
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.snapshots import (
    RESTORE_KEY,
    SNAPSHOT_KEY,
    NoSnapshot,
    covering_snapshot,
    open_snapshot_store,
    snapshot_facts,
)
from treadle.runtime.status import ConversationStatus as Status


def call(name, arguments):
    return {"name": name, "arguments": arguments}


def edit(command, path, **fields):
    return {"tool_calls": [call("file_editor", {"command": command, "path": path, **fields})]}


def bash(command):
    return {"tool_calls": [call("terminal", {"command": command})]}


FINISH = {"tool_calls": [call("finish", {"message": "done"})]}


def create(store, workspace: Path, responses, **fields) -> Conversation:
    return Conversation.create(
        store, ConversationSettings.scripted_inline(responses, workspace, **fields)
    )


def results(conversation):
    return [
        e for e in conversation.active_path() if isinstance(e, ObservationEvent | AgentErrorEvent)
    ]


def facts(store, conversation_id, key):
    events = [item.event for item in store.get_range(conversation_id, 0, 10**9)]
    return [e.value for e in events if isinstance(e, StateChangeEvent) and e.key == key]


def seed_conversation(store, workspace):
    """code.py created with foo, then foo renamed to bar (the seed's branch). The scripted
    model answers by its place on the path: switched back to the creation, its next answer is
    the rename again, as a model that still believes the old name would send it."""
    return create(
        store,
        workspace,
        [
            edit("create", "code.py", file_text="def foo():\n    return 1\n"),
            edit("str_replace", "code.py", old_str="def foo", new_str="def bar"),
            FINISH,
        ],
    )


def test_the_seeds_counterexample_is_fixed_by_a_restore(store, workspace):
    with seed_conversation(store, workspace) as conv:
        conv.send_message("write foo, then rename it")
        assert conv.run() is Status.FINISHED
        assert "def bar" in (workspace / "code.py").read_text()
        created = results(conv)[0]  # the file as it was: foo
        restored = conv.switch_branch(created.id, restore_files=True)
        assert restored is not None
        assert restored.changed == ["code.py"]
        assert (workspace / "code.py").read_text() == "def foo():\n    return 1\n"
        conv.send_message("rename foo to bar")
        assert conv.run() is Status.FINISHED
        replaced = results(conv)[-2]
        assert isinstance(replaced, ObservationEvent), replaced
        assert replaced.tool_name == "file_editor"
        assert (workspace / "code.py").read_text() == "def bar():\n    return 1\n"
        (restore_done,) = [v for v in facts(store, conv.id, RESTORE_KEY) if v["phase"] == "done"]
        assert restore_done["changed"] == ("code.py",)
        assert restore_done["event"] == created.id
        assert restore_done["snapshot"] == snapshot_facts(store, conv.id)[1].id


def test_without_a_restore_the_replace_fails_as_the_seed_says(store, workspace):
    with seed_conversation(store, workspace) as conv:
        conv.send_message("write foo, then rename it")
        assert conv.run() is Status.FINISHED
        created = results(conv)[0]
        assert conv.switch_branch(created.id) is None
        assert "def bar" in (workspace / "code.py").read_text()
        conv.send_message("rename foo to bar")
        conv.run()
        failed = results(conv)[-2]
        assert isinstance(failed, AgentErrorEvent)
        assert "old_str was found 0 times in code.py" in failed.error
        assert facts(store, conv.id, RESTORE_KEY) == []


def test_a_snapshot_after_each_batch_and_at_the_first_event(store, workspace):
    (workspace / "big.bin").write_bytes(b"x" * 2048)
    with create(
        store,
        workspace,
        [edit("create", "a.txt", file_text="a\n"), bash("echo b > b.txt"), FINISH],
        snapshots={"max_file_bytes": 1024},
    ) as conv:
        conv.send_message("go")
        conv.run()
        path = conv.active_path()
    recorded = facts(store, conv.id, SNAPSHOT_KEY)
    observations = [e for e in path if isinstance(e, ObservationEvent)]
    # finish cannot change a file: no snapshot after its batch (the one before covers it).
    assert observations[-1].tool_name == "finish"
    expected = [
        path[0].id,  # the system prompt: the files the conversation starts from
        *(e.id for e in observations[:-1]),
    ]
    assert [value["after_event"] for value in recorded] == expected
    first, after_a, after_b = recorded
    assert (first["files"], after_a["changed"], after_b["changed"]) == (0, ("a.txt",), ("b.txt",))
    assert "read" not in after_b
    assert covering_snapshot(store, conv.id, observations[-1].id).id == after_b["id"]
    assert after_a["bytes_added"] > 0
    assert "big.bin (over 1024 bytes)" in first["skipped"]
    snapshot_folder = workspace.parent / "runtime.db.snapshots"
    assert snapshot_folder.stat().st_mode & 0o777 == 0o700  # copies of the files: private


def test_changes_by_bash_are_restored_a_deleted_file_comes_back_ignored_files_untouched(
    store, workspace
):
    (workspace / ".gitignore").write_text("build/\n*.log\n")
    (workspace / "keep.txt").write_text("original\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "out.o").write_text("object v1\n")
    (workspace / "run.log").write_text("log v1\n")
    with create(
        store,
        workspace,
        [
            bash(
                "echo changed > keep.txt && rm -f .gitignore.bak && mkdir -p src && "
                "echo new > src/new.txt && echo object v2 > build/out.o && echo log v2 > run.log"
            ),
            bash("rm keep.txt"),
            FINISH,
        ],
    ) as conv:
        conv.send_message("go")
        assert conv.run() is Status.FINISHED
        assert not (workspace / "keep.txt").exists()
        recorded = facts(store, conv.id, SNAPSHOT_KEY)
        assert "build/ (ignored)" in recorded[0]["skipped"]
        assert "run.log (ignored)" in recorded[0]["skipped"]
        system_prompt = conv.active_path()[0]
        conv.switch_branch(system_prompt.id, restore_files=True)
        assert (workspace / "keep.txt").read_text() == "original\n"  # deleted by bash: back
        assert not (workspace / "src").exists()  # made by bash after: gone, folder too
        # Ignored files are neither recorded nor touched.
        assert (workspace / "build" / "out.o").read_text() == "object v2\n"
        assert (workspace / "run.log").read_text() == "log v2\n"
        tree = subprocess.run(
            [
                "git",
                "--git-dir",
                str(workspace.parent / "runtime.db.snapshots" / "objects.git"),
                "ls-tree",
                "-r",
                "--name-only",
                recorded[-1]["id"],
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert tree == [".gitignore", "src/new.txt"]


def test_a_restore_first_snapshots_hand_changes_and_can_be_undone(store, workspace):
    with seed_conversation(store, workspace) as conv:
        conv.send_message("go")
        conv.run()
        (workspace / "notes.txt").write_text("typed by hand\n")
        restored = conv.switch_branch(results(conv)[0].id, restore_files=True)
        assert not (workspace / "notes.txt").exists()
        assert sorted(restored.changed) == ["code.py", "notes.txt"]
        undone = conv.restore_snapshot(restored.previous_snapshot)
        assert (workspace / "notes.txt").read_text() == "typed by hand\n"
        assert "def bar" in (workspace / "code.py").read_text()
        assert sorted(undone.changed) == ["code.py", "notes.txt"]
        with pytest.raises(NoSnapshot, match="is not recorded in conversation"):
            conv.restore_snapshot("0" * 40)


def test_no_snapshot_covering_the_event_changes_nothing(store, workspace):
    with create(
        store, workspace, [edit("create", "a.txt", file_text="a\n"), FINISH], snapshots=False
    ) as conv:
        conv.send_message("go")
        conv.run()
        head = conv.head
        with pytest.raises(NoSnapshot, match="takes no workspace snapshots"):
            conv.switch_branch(conv.active_path()[0].id, restore_files=True)
        assert conv.head == head
        assert (workspace / "a.txt").exists()
        assert facts(store, conv.id, SNAPSHOT_KEY) == []

    parallel = {
        "tool_calls": [
            call("file_editor", {"command": "create", "path": "p.txt", "file_text": "p\n"}),
            call("file_editor", {"command": "create", "path": "q.txt", "file_text": "q\n"}),
        ]
    }
    with create(store, workspace, [parallel, FINISH]) as conv:
        conv.send_message("go")
        conv.run()
        first_result, second_result = results(conv)[:2]
        # Between the two results of one batch, files changed that no snapshot holds.
        with pytest.raises(NoSnapshot, match=f"no snapshot covers event {first_result.id}"):
            conv.switch_branch(first_result.id, restore_files=True)
        assert (workspace / "p.txt").exists()
        assert conv.head != first_result.id
        # The first action follows the first event's snapshot with no result between: covered.
        action = next(e for e in conv.active_path() if e.kind == "action")
        assert conv.switch_branch(action.id, restore_files=True) is not None
        assert not (workspace / "p.txt").exists()
        assert not (workspace / "q.txt").exists()
        assert conv.switch_branch(second_result.id, restore_files=True) is not None
        assert (workspace / "q.txt").read_text() == "q\n"


def test_a_fork_with_restore_fills_its_own_workspace_and_leaves_the_original(
    store, workspace, tmp_path
):
    with seed_conversation(store, workspace) as conv:
        conv.send_message("go")
        conv.run()
        created = results(conv)[0]
        with pytest.raises(ForkNeedsWorkspace):
            conv.fork(created.id, restore_files=True)
        other = tmp_path / "fork-workspace"
        (workspace / "code.py").write_text("def bar():  # by hand\n")
        before = {p.name: p.read_bytes() for p in workspace.iterdir()}
        with conv.fork(created.id, restore_files=True, workspace=str(other)) as fork:
            assert (other / "code.py").read_text() == "def foo():\n    return 1\n"
            assert {p.name: p.read_bytes() for p in workspace.iterdir()} == before
            stored = ConversationSettings.from_metadata(store.get_conversation(fork.id).metadata)
            assert stored.workspace == str(other.resolve())
            assert fork.workspace.root == other.resolve()
            # The fork holds the snapshots of the events it copied, and its own restore.
            assert len(snapshot_facts(store, fork.id)) >= 2
            assert [v["phase"] for v in facts(store, fork.id, RESTORE_KEY)] == ["started", "done"]
            fork.send_message("rename foo to bar")
            assert fork.run() is Status.FINISHED
            assert (other / "code.py").read_text() == "def bar():\n    return 1\n"
        assert {p.name: p.read_bytes() for p in workspace.iterdir()} == before


def test_the_store_inside_the_workspace_is_never_snapshotted_nor_restored(tmp_path):
    from treadle.store.urls import open_store

    workspace = tmp_path / "ws"
    workspace.mkdir()
    opened = open_store(f"sqlite:///{workspace / 'inside.db'}")
    try:
        with create(opened, workspace, [edit("create", "a.txt", file_text="a\n"), FINISH]) as conv:
            conv.send_message("go")
            conv.run()
            for value in facts(opened, conv.id, SNAPSHOT_KEY):
                assert value["files"] <= 1, value
            conv.switch_branch(conv.active_path()[0].id, restore_files=True)
            assert not (workspace / "a.txt").exists()
            assert (workspace / "inside.db").exists()
            assert json.dumps(conv.active_path()[0].model_dump(mode="json"))
    finally:
        opened.close()


def git(workspace, *args):
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_workspaces_git_folder_is_skipped_unless_the_settings_include_it(
    store, workspace, tmp_path
):
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("one\n")
    git(workspace, "add", "a.txt")
    git(workspace, "commit", "-q", "-m", "one")
    commit_two = bash(
        "echo two > a.txt && git -c user.name=t -c user.email=t@localhost commit -qam two"
    )
    for include in (False, True):
        git(
            workspace,
            "reset",
            "-q",
            "--hard",
            git(workspace, "rev-list", "--max-parents=0", "HEAD").strip(),
        )
        with create(
            store, workspace, [commit_two, FINISH], snapshots={"include_git": include}
        ) as conv:
            conv.send_message("commit")
            conv.run()
            assert git(workspace, "log", "--format=%s").split() == ["two", "one"]
            first = facts(store, conv.id, SNAPSHOT_KEY)[0]
            conv.switch_branch(conv.active_path()[0].id, restore_files=True)
            assert (workspace / "a.txt").read_text() == "one\n"
            if include:
                assert "git_tree" in first
                assert git(workspace, "log", "--format=%s").split() == ["one"]
                assert git(workspace, "status", "--porcelain") == ""
            else:
                assert (
                    ".git/ (the workspace's own git folder; settings can include it)"
                    in (first["skipped"])
                )
                assert git(workspace, "log", "--format=%s").split() == ["two", "one"]


@pytest.mark.parametrize("exclude", [None, []])
def test_caches_are_left_out_of_snapshots_unless_the_settings_say_otherwise(
    store, workspace, exclude
):
    # A workspace without a .gitignore: Python's caches used to show as changes of every call.
    make = bash(
        "mkdir -p pkg/__pycache__ .pytest_cache && echo y > pkg/m.py && "
        "echo x > pkg/__pycache__/m.cpython-311.pyc && echo z > top.pyc && "
        "echo c > .pytest_cache/v"
    )
    fields = {} if exclude is None else {"snapshots": {"exclude": exclude}}
    with create(store, workspace, [make, FINISH], **fields) as conv:
        conv.send_message("make files")
        conv.run()
        taken = facts(store, conv.id, SNAPSHOT_KEY)[-1]
    caches = {".pytest_cache/v", "pkg/__pycache__/m.cpython-311.pyc", "top.pyc"}
    if exclude is None:
        assert list(taken["changed"]) == ["pkg/m.py"]
        assert {entry.removesuffix(" (ignored)") for entry in taken["skipped"]} >= {
            "pkg/__pycache__/",
            ".pytest_cache/",
            "top.pyc",
        }
    else:
        assert set(taken["changed"]) == {"pkg/m.py", *caches}


def test_a_snapshot_exclude_pattern_must_be_one_line():
    from pydantic import ValidationError

    from treadle.data.settings import SnapshotSettings

    with pytest.raises(ValidationError, match="one line"):
        SnapshotSettings(exclude=("ok/", "two\nlines"))
    assert SnapshotSettings().exclude[0] == "__pycache__/"


def test_one_snapshot_store_per_folder_in_a_process_and_its_folder_comes_back(
    store, workspace: Path
):
    """Conversations of one workspace share the per-workspace lock (git never runs twice on
    its index at once from here) and the trees it remembers; a folder removed under it is
    made again on the next snapshot."""
    first = open_snapshot_store(store)
    assert first is not None
    assert open_snapshot_store(store) is first
    (workspace / "a.txt").write_text("one\n")
    taken = first.take(workspace)
    assert taken.files == 1
    shutil.rmtree(first.root)
    (workspace / "b.txt").write_text("two\n")
    again = open_snapshot_store(store)
    assert again is first
    retaken = again.take(workspace)
    assert retaken.files == 2
    assert sorted(retaken.changed) == ["a.txt", "b.txt"]
