"""Workspace snapshots through the agent server and the typed client: switch and fork with
restore, restore (undo), diff, the list, refusals, and snapshots deleted with their
conversation. A real ``treadle serve`` over SQLite, real tools, real git."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from treadle.client import RemoteError, TreadleClient
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.snapshots import GitSnapshotStore
from treadle.runtime.status import ConversationStatus as Status

CREATE = {
    "tool_calls": [
        {
            "name": "file_editor",
            "arguments": {"command": "create", "path": "code.py", "file_text": "def foo():\n"},
        }
    ]
}
RENAME = {
    "tool_calls": [
        {
            "name": "file_editor",
            "arguments": {
                "command": "str_replace",
                "path": "code.py",
                "old_str": "def foo",
                "new_str": "def bar",
            },
        }
    ]
}
BY_BASH = {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo x > made.txt"}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder


@pytest.fixture
def served(tmp_path: Path, root: Path) -> Iterator[tuple[TreadleClient, str]]:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    process = ServerProcess(url, log_dir=tmp_path, workspace_root=root).start()
    try:
        with TreadleClient(process.base_url) as client:
            yield client, url
    finally:
        process.stop()
    assert_store_audits_clean(url)


def results(conversation):
    return [e for e in conversation.active_path() if e.kind in ("observation", "agent_error")]


def test_switch_restore_undo_and_diff_over_the_api(served, root):
    client, _url = served
    settings = ConversationSettings.scripted_inline([CREATE, RENAME, BY_BASH, FINISH], root / "ws")
    conversation = client.create_conversation(settings)
    conversation.send_message("go")
    assert conversation.run() is Status.FINISHED
    created, renamed, made = results(conversation)[:3]
    found = conversation.diff(created.id, made.id)
    assert found.changed == ["code.py", "made.txt"]
    assert "-def foo():" in found.diff
    assert "+def bar():" in found.diff
    assert "+x" in found.diff
    assert conversation.diff(made.id, made.id).diff == ""

    restored = conversation.switch_branch(created.id, restore_files=True)
    assert restored is not None
    assert sorted(restored.changed) == ["code.py", "made.txt"]
    assert (root / "ws" / "code.py").read_text() == "def foo():\n"
    assert not (root / "ws" / "made.txt").exists()
    assert conversation.head == created.id
    assert conversation.switch_branch(renamed.id) is None  # files untouched by default
    assert (root / "ws" / "code.py").read_text() == "def foo():\n"

    undone = conversation.restore(restored.previous_snapshot)
    assert (root / "ws" / "made.txt").read_text() == "x\n"
    assert undone.snapshot == restored.previous_snapshot
    listed = conversation.snapshots()
    assert [item.reason for item in listed].count("before restore") == 2
    assert all(item.bytes >= 0 for item in listed)

    with pytest.raises(RemoteError) as caught:
        conversation.restore("0" * 40)
    assert (caught.value.status, caught.value.code) == (409, "no_snapshot")
    action = next(e for e in conversation.active_path() if e.kind == "action")
    with pytest.raises(RemoteError) as caught:
        conversation.diff(action.id, "no-such-event")
    assert caught.value.status == 404


def test_fork_with_restore_inside_the_workspace_root(served, root, tmp_path):
    client, url = served
    settings = ConversationSettings.scripted_inline([CREATE, RENAME, FINISH], root / "ws")
    conversation = client.create_conversation(settings)
    conversation.send_message("go")
    conversation.run()
    created = results(conversation)[0]
    with pytest.raises(RemoteError) as caught:
        conversation.fork(created.id, restore_files=True)
    assert (caught.value.status, caught.value.code) == (422, "fork_needs_workspace")
    with pytest.raises(RemoteError) as caught:
        conversation.fork(created.id, restore_files=True, workspace=str(tmp_path / "outside"))
    assert caught.value.code == "workspace_outside_root"
    assert not (tmp_path / "outside").exists()

    fork = conversation.fork(created.id, restore_files=True, workspace="fork-ws")
    assert (root / "fork-ws" / "code.py").read_text() == "def foo():\n"
    assert (root / "ws" / "code.py").read_text() == "def bar():\n"  # the original: untouched
    assert fork.info().metadata["settings"]["workspace"] == str(root / "fork-ws")
    fork.send_message("rename it here")
    assert fork.run() is Status.FINISHED
    assert (root / "fork-ws" / "code.py").read_text() == "def bar():\n"

    # Deleted with their conversation: the refs go, the objects at the next gc.
    objects = GitSnapshotStore(Path(url.removeprefix("sqlite:///") + ".snapshots"))
    assert conversation.id in objects.owners()
    conversation.delete()
    assert conversation.id not in objects.owners()
    assert fork.id in objects.owners()


def test_a_switch_with_restore_and_no_snapshot_changes_nothing(served, root):
    client, _url = served
    settings = ConversationSettings.scripted_inline([CREATE, FINISH], root / "ws", snapshots=False)
    conversation = client.create_conversation(settings)
    conversation.send_message("go")
    conversation.run()
    head = conversation.head
    first = conversation.active_path()[0]
    with pytest.raises(RemoteError) as caught:
        conversation.switch_branch(first.id, restore_files=True)
    assert (caught.value.status, caught.value.code) == (409, "no_snapshot")
    assert conversation.head == head
    assert (root / "ws" / "code.py").exists()
    with pytest.raises(RemoteError) as caught:
        conversation.diff(first.id, head)
    assert caught.value.code == "no_snapshot"
