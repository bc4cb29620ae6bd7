"""``treadle switch/fork/restore/diff/snapshots`` as a user runs them, and a restore killed
with SIGKILL: on the next start the workspace holds the old or the new files, and the log
says which."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from support.cli import invoke_treadle
from support.waiting import wait_until
from treadle.events.model import StateChangeEvent
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.snapshots import GitSnapshotStore
from treadle.store.leases import SERVER, open_leases
from treadle.store.urls import open_store


def editor(command, path, **fields):
    return {
        "tool_calls": [
            {"name": "file_editor", "arguments": {"command": command, "path": path, **fields}}
        ]
    }


def bash(command):
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def run_script(tmp_path: Path, url: str, workspace: Path, responses) -> str:
    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.json"
    script.write_text(json.dumps({"responses": responses}))
    ran = invoke_treadle(
        "run",
        "go",
        "--create-workspace",
        "--workspace",
        str(workspace),
        "--script",
        str(script),
        "--store",
        url,
    )
    assert ran.returncode == 0, ran.stderr
    listed = invoke_treadle("conversations", "--json", "--store", url)
    return json.loads(listed.stdout)[0]["id"]


def result_ids(url: str, conversation_id: str) -> list[str]:
    store = open_store(url)
    try:
        return [e.id for e in store.path_to_root(conversation_id) if e.kind == "observation"]
    finally:
        store.close()


def restore_facts(url: str, conversation_id: str) -> list[dict]:
    store = open_store(url)
    try:
        events = [item.event for item in store.get_range(conversation_id, 0, 10**9)]
    finally:
        store.close()
    return [e.value for e in events if isinstance(e, StateChangeEvent) and e.key == "restore"]


def test_switch_diff_restore_fork_and_snapshots(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    workspace = tmp_path / "ws"
    conversation = run_script(
        tmp_path,
        url,
        workspace,
        [
            editor("create", "code.py", file_text="def foo():\n"),
            editor("str_replace", "code.py", old_str="def foo", new_str="def bar"),
            FINISH,
        ],
    )
    created, renamed, _finished = result_ids(url, conversation)

    shown = invoke_treadle("diff", conversation, created, renamed, "--store", url)
    assert shown.returncode == 0, shown.stderr
    assert "-def foo():\n+def bar():\n" in shown.stdout
    missing = invoke_treadle("diff", conversation, created, "nope", "--store", url)
    assert missing.returncode == 2
    assert f"no event 'nope' in conversation {conversation}" in missing.stderr

    switched = invoke_treadle("switch", conversation, created, "--restore-files", "--store", url)
    assert switched.returncode == 0, switched.stderr
    assert "1 file(s) changed" in switched.stdout
    assert (workspace / "code.py").read_text() == "def foo():\n"
    previous = restore_facts(url, conversation)[-1]["previous_snapshot"]

    undone = invoke_treadle("restore", conversation, previous[:10], "--store", url, "--json")
    assert undone.returncode == 0, undone.stderr
    assert json.loads(undone.stdout)["changed"] == ["code.py"]
    assert (workspace / "code.py").read_text() == "def bar():\n"
    unknown = invoke_treadle("restore", conversation, "ffffffff", "--store", url)
    assert unknown.returncode == 2
    assert "no snapshot 'ffffffff' in conversation" in unknown.stderr

    refused = invoke_treadle("fork", conversation, created, "--restore-files", "--store", url)
    assert refused.returncode == 2
    assert "--restore-files needs --workspace DIR" in refused.stderr
    forked = invoke_treadle(
        "fork",
        conversation,
        created,
        "--restore-files",
        "--workspace",
        str(tmp_path / "other"),
        "--store",
        url,
        "--json",
    )
    assert forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout)["restore"]["changed"] == ["code.py"]
    assert (tmp_path / "other" / "code.py").read_text() == "def foo():\n"
    assert (workspace / "code.py").read_text() == "def bar():\n"

    listed = invoke_treadle("snapshots", conversation, "--store", url, "--json")
    snapshots = json.loads(listed.stdout)["snapshots"]
    assert [s["after_event"] for s in snapshots][1:4] == [created, renamed, _finished]
    assert {s["reason"] for s in snapshots} == {None, "before restore"}
    assert all(s["bytes"] >= 0 for s in snapshots)
    # As text at 80 columns: each event as a short prefix that `switch` takes.
    text = invoke_treadle("snapshots", conversation, "--store", url, columns=80)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()[:-1]
    assert len(lines) == len(snapshots)
    assert all(len(line) <= 80 for line in lines), lines
    shown_event = lines[1].split("after ", 1)[1].split()[0]
    assert created.startswith(shown_event)
    assert shown_event != created

    # Snapshots go with their conversation: --gc drops what only a deleted one held.
    fork_id = json.loads(forked.stdout)["id"]
    store = open_store(url)
    store.delete_conversation(conversation)
    store.close()
    collected = invoke_treadle("snapshots", fork_id, "--gc", "--store", url, "--json")
    assert collected.returncode == 0, collected.stderr
    gc = json.loads(collected.stdout)["gc"]
    assert gc["refs_dropped"] >= 3
    objects = GitSnapshotStore(tmp_path / "cli.db.snapshots")
    only_deleted = snapshots[2]["id"]  # def bar: no snapshot of the fork holds it
    kept_by_fork = snapshots[1]["id"]
    assert not objects.exists(only_deleted)
    assert objects.exists(kept_by_fork)
    # The fork's snapshots survive the collection: it can still restore its own.
    again = invoke_treadle("switch", fork_id, created, "--restore-files", "--store", url)
    assert again.returncode == 0, again.stderr


def test_no_snapshot_or_a_running_conversation_changes_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    workspace = tmp_path / "ws"
    store = open_store(url)
    settings = ConversationSettings.scripted_inline(
        [editor("create", "a.txt", file_text="a\n"), FINISH], workspace, snapshots=False
    )
    with Conversation.create(store, settings) as conv:
        conv.send_message("go")
        conv.run()
        first, head = conv.active_path()[0].id, conv.head
    store.close()
    switched = invoke_treadle("switch", conv.id, first, "--restore-files", "--store", url)
    assert switched.returncode == 2
    assert "takes no workspace snapshots" in switched.stderr
    shown = invoke_treadle("diff", conv.id, first, head, "--store", url)
    assert shown.returncode == 2
    assert "no snapshot covers event" in shown.stderr
    assert (workspace / "a.txt").exists()

    conversation = run_script(
        tmp_path, url, tmp_path / "ws2", [editor("create", "b.txt", file_text="b\n"), FINISH]
    )
    leases = open_leases(url)
    try:
        assert leases.acquire(conversation, f"{SERVER}-elsewhere", 30)
        busy = invoke_treadle(
            "switch",
            conversation,
            result_ids(url, conversation)[0],
            "--restore-files",
            "--store",
            url,
        )
        assert busy.returncode == 2
        assert "the files are not changed while a run is active" in busy.stderr
        assert restore_facts(url, conversation) == []
    finally:
        leases.close()


def test_a_restore_killed_midway_is_finished_on_the_next_start(tmp_path):
    """A restore of 1,000 files is killed (SIGKILL) once the log says it started; the next
    open of the conversation finishes it: every file is the restored version, and the log's
    last restore fact is ``done`` with ``recovered``."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    workspace = tmp_path / "ws"
    # printf is a bash builtin: 1,000 files of 20 kB without 1,000 processes.
    write = "mkdir -p d && for i in $(seq 1000); do printf '%20000s' {c} > d/f$i; done"
    conversation = run_script(
        tmp_path, url, workspace, [bash(write.format(c="a")), bash(write.format(c="b")), FINISH]
    )
    old_files, _new_files, _finish = result_ids(url, conversation)
    database = str(tmp_path / "cli.db")

    def restore_started() -> bool:
        with sqlite3.connect(database) as db:
            (count,) = db.execute(
                'SELECT count(*) FROM events WHERE payload LIKE \'%"phase":"started"%\''
            ).fetchone()
        return count > 0

    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "treadle",
            "switch",
            conversation,
            old_files,
            "--restore-files",
            "--store",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        wait_until(
            lambda: restore_started() or child.poll() is not None, 60, "the restore to start"
        )
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    contents = {path.read_bytes()[-1:] for path in (workspace / "d").iterdir()}
    killed_midway = contents == {b"a", b"b"}
    store = open_store(url)
    try:
        with Conversation.open(store, conversation) as reopened:  # the next start
            assert reopened.head is not None
    finally:
        store.close()
    phases = [(v["phase"], v.get("recovered")) for v in restore_facts(url, conversation)]
    contents = {path.read_bytes() for path in (workspace / "d").iterdir()}
    assert len(list((workspace / "d").iterdir())) == 1000
    if phases[-1][0] == "done":
        assert contents == {b" " * 19999 + b"a"}  # the new state, and the log says done
    else:
        assert phases[-1] == ("rolled_back", None)
        assert contents == {b" " * 19999 + b"b"}  # the old state; the log says rolled back
    if killed_midway:  # the files were half restored: the recovery finished them
        assert phases[-2:] == [("started", None), ("done", True)]
