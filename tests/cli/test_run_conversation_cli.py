"""``treadle run --conversation ID [MESSAGE]``: continuing a stored conversation from the
command line, with its stored settings or with settings given for an imported one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.cli import invoke_treadle
from support.scripts import write_script
from treadle.events.audit import audit_events
from treadle.runtime.status import read_status
from treadle.store.leases import new_owner, open_leases
from treadle.store.urls import open_store


def treadle(*args: str) -> subprocess.CompletedProcess[str]:
    return invoke_treadle(*args, columns=200, drop=("TREADLE_STORE", "TREADLE_MODEL"))


def terminal(command: str) -> dict:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


def only_conversation(url: str) -> str:
    store = open_store(url)
    try:
        (info,) = store.list_conversations()
        return info.id
    finally:
        store.close()


def stored(url: str, conversation_id: str):
    store = open_store(url)
    try:
        info = store.get_conversation(conversation_id)
        events = [item.event for item in store.get_range(conversation_id, 0, info.event_count)]
        status = read_status(store, conversation_id)
        return info, events, status
    finally:
        store.close()


def test_a_stored_conversation_continues_with_its_own_settings(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    script = write_script(
        tmp_path,
        [
            terminal("echo one > out.txt"),
            {"text": "first done"},
            terminal("echo two >> out.txt"),
            {"text": "second done"},
        ],
    )
    workspace = tmp_path / "ws"
    first = treadle(
        "run",
        "first",
        "--create-workspace",
        "--workspace",
        str(workspace),
        "--script",
        str(script),
        "--store",
        url,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    conversation_id = only_conversation(url)

    # finished, and no message: nothing to continue
    bare = treadle("run", "--conversation", conversation_id, "--store", url)
    assert bare.returncode == 2
    assert "is finished: give a MESSAGE" in bare.stderr

    second = treadle("run", "--conversation", conversation_id, "second", "--store", url)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"conversation: {conversation_id}" in second.stdout
    assert (workspace / "out.txt").read_text() == "one\ntwo\n"
    _info, events, (status, _reason) = stored(url, conversation_id)
    assert status.value == "finished"
    assert [e.text for e in events if e.kind == "message" and e.source == "user"] == [
        "first",
        "second",
    ]
    assert audit_events(events).clean

    # the stored settings are kept: other ones are refused before anything is written
    other = treadle(
        "run", "--conversation", conversation_id, "x", "--workspace", str(tmp_path), "--store", url
    )
    assert other.returncode == 2
    assert "--workspace (stored: " in other.stderr
    assert "Traceback" not in other.stderr
    assert len(stored(url, conversation_id)[1]) == len(events)


def test_an_imported_conversation_needs_settings_once_then_keeps_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    log = tmp_path / "log.jsonl"
    log.write_text(
        json.dumps(
            {
                "kind": "message",
                "source": "user",
                "id": "hello",
                "timestamp": "2025-01-01T00:00:00Z",
                "text": "say hi",
                "parent_id": "__root__",
            }
        )
        + "\n"
    )
    imported = treadle("import", "jsonl", str(log), "--store", url)
    assert imported.returncode == 0, imported.stderr
    conversation_id = imported.stdout.strip()

    without = treadle("run", "--conversation", conversation_id, "--store", url)
    assert without.returncode == 2
    assert "has no stored settings" in without.stderr
    assert "--workspace" in without.stderr

    script = write_script(
        tmp_path, [{"text": "hi"}, terminal("echo again > again.txt"), {"text": "ok"}]
    )
    workspace = tmp_path / "ws"
    ran = treadle(
        "run", "--conversation", conversation_id, "--workspace", str(workspace), "--script",
        str(script), "--store", url,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    info, events, (status, _reason) = stored(url, conversation_id)
    assert info.metadata["settings"]["workspace"] == str(workspace.resolve())
    assert info.metadata["settings"]["model"]["script"] == str(script.resolve())
    assert info.metadata["origin"]["format"] == "jsonl"  # kept beside the settings
    assert status.value == "finished"
    assert events[0].id == "hello"

    again = treadle("run", "--conversation", conversation_id, "once more", "--store", url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (workspace / "again.txt").exists()


def test_a_conversation_another_process_runs_is_refused_naming_the_holder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    script = write_script(tmp_path, [{"text": "one"}, {"text": "two"}])
    first = treadle(
        "run",
        "go",
        "--create-workspace",
        "--workspace",
        str(tmp_path / "ws"),
        "--script",
        str(script),
        "--store",
        url,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    conversation_id = only_conversation(url)
    count = len(stored(url, conversation_id)[1])
    leases = open_leases(url)
    holder = new_owner("server")
    try:
        assert leases.acquire(conversation_id, holder, 60)
        refused = treadle("run", "--conversation", conversation_id, "more", "--store", url)
    finally:
        leases.release(conversation_id, holder)
        leases.close()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert holder in refused.stderr
    assert "running in another process" in refused.stderr
    assert len(stored(url, conversation_id)[1]) == count  # nothing was written


def test_continue_needs_a_known_conversation_and_a_new_run_its_task(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    open_store(url).close()
    unknown = treadle("run", "--conversation", "nope", "hi", "--store", url)
    assert unknown.returncode == 2
    assert "no conversation 'nope'" in unknown.stderr
    neither = treadle("run", "--store", url)
    assert neither.returncode == 2
    assert "--conversation ID" in neither.stderr
    no_workspace = treadle("run", "a task", "--store", url)  # in the current folder
    assert no_workspace.returncode == 2
    assert "no model given" in no_workspace.stderr
