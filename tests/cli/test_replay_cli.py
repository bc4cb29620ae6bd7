"""``treadle replay`` as a user runs it, on conversations made by ``treadle run``: exit 0 when
the replay is the same, 1 with each divergence named (REPLAY-RECORDED on the tampered event,
REPLAY-RERUN on the action that ran differently), 2 for bad input; a rerun is a new
conversation and leaves the original's rows byte for byte as they were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support.cli import invoke_treadle
from support.replays import FINISH, bash, call, calls, copy_with, raw_rows, recorded
from treadle.runtime.workspace import check_bubblewrap
from treadle.store.urls import open_store

JSON_KEYS = {
    "mode",
    "conversation",
    "head",
    "same",
    "divergences",
    "recorded_events",
    "replayed_events",
    "new_conversation",
    "workspace",
    "starting_files",
    "actions",
    "file_changes",
}
DIVERGENCE_KEYS = {
    "contract",
    "message",
    "event_id",
    "replayed_event_id",
    "action_id",
    "tool_call_id",
    "tool",
    "kind",
    "fields",
    "expected",
    "actual",
    "after_event_id",
}


def run_script(tmp_path: Path, url: str, responses: list[dict]) -> str:
    """A conversation made by ``treadle run`` (no sandbox: these tests are about replay)."""
    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.json"
    script.write_text(json.dumps({"responses": responses}))
    workspace = tmp_path / "workspace"
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
        "--sandbox",
        "none",
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    listed = invoke_treadle("conversations", "--json", "--store", url)
    return json.loads(listed.stdout)[0]["id"]


def replay(url: str, *args: str):
    return invoke_treadle("replay", *args, "--store", url)


PARALLEL = calls(
    call("terminal", {"command": "echo one > one.txt"}),
    call("file_editor", {"command": "view", "path": "missing.txt"}),
    text="Two at once.",
)


def test_a_recorded_replay_of_a_run_is_the_same(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    conversation = run_script(tmp_path, url, [PARALLEL, bash("cat one.txt"), FINISH])
    shown = replay(url, conversation, "--mode", "recorded")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"replay (recorded) of {conversation}" in shown.stdout
    assert shown.stdout.rstrip().endswith("replayed: same")
    as_json = replay(url, conversation, "--mode", "recorded", "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert set(report) == JSON_KEYS
    assert report["same"] is True
    assert report["divergences"] == []
    assert report["replayed_events"] == report["recorded_events"] > 6
    assert report["new_conversation"] is None


def test_a_tampered_log_exits_1_naming_the_event(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    conversation = run_script(tmp_path, url, [PARALLEL, FINISH])
    store = open_store(url)
    try:
        path = store.path_to_root(conversation)
        index = next(i for i, e in enumerate(path) if e.kind == "observation")

        def wrong_call_id(events):
            events[index] = events[index].model_copy(update={"tool_call_id": "not-the-call"})
            return events

        tampered = copy_with(store, conversation, wrong_call_id)
    finally:
        store.close()
    shown = replay(url, tampered, "--mode", "recorded", "--json")
    assert shown.returncode == 1, shown.stdout + shown.stderr
    report = json.loads(shown.stdout)
    (divergence,) = report["divergences"]
    assert set(divergence) == DIVERGENCE_KEYS
    assert divergence["contract"] == "REPLAY-RECORDED"
    assert divergence["event_id"] == path[index].id
    assert divergence["kind"] == "observation"
    text = replay(url, tampered, "--mode", "recorded")
    assert text.returncode == 1
    assert f"REPLAY-RECORDED {path[index].id} (observation" in text.stdout


def test_a_rerun_names_the_divergent_action_and_leaves_the_original_as_it_was(tmp_path):
    database = tmp_path / "cli.db"
    url = f"sqlite:///{database}"
    conversation = run_script(
        tmp_path, url, [bash("echo steady"), bash("date +%s%N > now.txt; cat now.txt"), FINISH]
    )
    before = raw_rows(database, conversation)
    into = tmp_path / "rerun"
    shown = replay(url, conversation, "--mode", "rerun", "--into", str(into), "--json")
    assert shown.returncode == 1, shown.stdout + shown.stderr
    report = json.loads(shown.stdout)
    (divergence,) = report["divergences"]
    assert divergence["contract"] == "REPLAY-RERUN"
    assert divergence["tool"] == "terminal"
    assert divergence["tool_call_id"] == "call-1-0"
    assert [a["same"] for a in report["actions"]] == [True, False, True]
    assert divergence["action_id"] == report["actions"][1]["action_id"]
    assert report["file_changes"] == [{"status": "M", "path": "now.txt"}]
    assert report["workspace"] == str(into.resolve())
    listed = json.loads(invoke_treadle("conversations", "--json", "--store", url).stdout)
    assert {item["id"] for item in listed} == {conversation, report["new_conversation"]}
    assert raw_rows(database, conversation) == before
    # The text says the same, action by action.
    again = replay(url, conversation, "--mode", "rerun", "--into", str(tmp_path / "again"))
    assert again.returncode == 1
    assert f"DIFFERENT {divergence['action_id']} call-1-0 terminal" in again.stdout
    assert "M now.txt" in again.stdout


def test_a_rerun_without_an_into_folder_makes_one_and_says_where(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    conversation = run_script(tmp_path, url, [bash("echo same"), FINISH])
    shown = replay(url, conversation, "--mode", "rerun", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    folder = Path(json.loads(shown.stdout)["workspace"])
    try:
        assert folder.is_dir()
        assert folder.name.startswith(f"treadle-rerun-{conversation[:8]}")
    finally:
        shutil.rmtree(folder)


def test_bad_input_exits_2_with_a_clear_message(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    conversation = run_script(tmp_path, url, [FINISH])
    unknown = replay(url, "no-such-conversation", "--mode", "recorded")
    assert unknown.returncode == 2
    assert "no conversation 'no-such-conversation' in store" in unknown.stderr
    bad_head = replay(url, conversation, "--head", "no-such-event", "--mode", "rerun")
    assert bad_head.returncode == 2
    assert "no event 'no-such-event' in conversation" in bad_head.stderr
    misplaced = replay(url, conversation, "--mode", "recorded", "--workspace", str(tmp_path))
    assert misplaced.returncode == 2
    assert "apply to --mode rerun only" in misplaced.stderr
    assert replay(url, conversation).returncode == 2  # --mode is required
    assert "Traceback" not in unknown.stderr + bad_head.stderr + misplaced.stderr


def test_no_first_snapshot_and_no_workspace_exits_2(tmp_path):
    database = tmp_path / "cli.db"
    url = f"sqlite:///{database}"
    workspace = tmp_path / "original"
    workspace.mkdir()
    (workspace / "input.txt").write_text("data\n")
    store = open_store(url)
    try:
        conversation = recorded(
            store,
            workspace,
            [bash("cat input.txt"), FINISH],
            snapshots=False,
            sandbox={"kind": "none"},
        )
    finally:
        store.close()
    refused = replay(url, conversation, "--mode", "rerun", "--into", str(tmp_path / "r1"))
    assert refused.returncode == 2
    assert "has no snapshot of the files it started from" in refused.stderr
    assert "--workspace DIR" in refused.stderr
    ran = replay(
        url,
        conversation,
        "--mode",
        "rerun",
        "--workspace",
        str(workspace),
        "--into",
        str(tmp_path / "r2"),
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"files from workspace {workspace}" in ran.stdout
    assert "files: no recorded last snapshot to compare with" in ran.stdout


def test_a_run_made_in_the_sandbox_is_rerun_in_the_sandbox(tmp_path):
    try:
        check_bubblewrap()
    except Exception as problem:  # CI installs bubblewrap (make test)
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [bash("echo $HOME > home.txt"), FINISH]}))
    ran = invoke_treadle(
        "run",
        "go",
        "--create-workspace",
        "--workspace",
        str(tmp_path / "ws"),
        "--script",
        str(script),
        "--store",
        url,
    )  # the default: bubblewrap, network off
    assert ran.returncode == 0, ran.stdout + ran.stderr
    conversation = json.loads(invoke_treadle("conversations", "--json", "--store", url).stdout)[0][
        "id"
    ]
    into = tmp_path / "rerun"
    shown = replay(url, conversation, "--mode", "rerun", "--into", str(into), "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert (into / "home.txt").read_text() == "/home/sandbox\n"  # the sandbox's private HOME
    logged = invoke_treadle(
        "log", json.loads(shown.stdout)["new_conversation"], "--store", url, columns=300
    )
    assert "isolation (last run): bubblewrap, network off" in logged.stdout
