"""``treadle run --hooks`` as a user runs it: a PreToolUse hook that blocks ``rm -rf`` with a real
bash, the log that audits clean, the reason in the model's next request (a real LiteLLM call to a
local OpenAI-compatible server), workspace hooks only with --trust-workspace-hooks."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from support.cli import invoke_treadle
from support.fake_openai import FakeOpenAIServer
from support.processes import host_pids_with

BLOCK_RM = """#!/bin/sh
input=$(cat)
case "$input" in
  *"rm -rf"*) echo "rm -rf is refused: move files to trash/ instead" >&2; exit 2;;
esac
exit 0
"""
REASON = "rm -rf is refused: move files to trash/ instead"
DELETE = {"tool_calls": [{"name": "terminal", "arguments": {"command": "rm -rf data"}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def hook_file(folder: Path, command: str, matcher: str = "Bash", **options: Any) -> Path:
    entry = {"type": "command", "command": command, **options}
    path = folder / "settings.json"
    path.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": matcher, "hooks": [entry]}]}}))
    return path


def guard(folder: Path) -> Path:
    path = folder / "block-rm.sh"
    path.write_text(BLOCK_RM)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def workspace_with_data(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "data").mkdir(parents=True)
    (workspace / "data" / "keep.txt").write_text("precious")
    return workspace


def script(tmp_path: Path, responses: list[dict[str, Any]]) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"responses": responses}))
    return path


def stored_events(store: str) -> tuple[str, list[dict[str, Any]]]:
    (listed,) = json.loads(invoke_treadle("conversations", "--json", "--store", store).stdout)
    events = json.loads(invoke_treadle("log", listed["id"], "--json", "--store", store).stdout)
    return listed["id"], events


def exported(tmp_path: Path, store: str, conversation: str) -> Path:
    """The whole stored log (state changes included) as a JSON Lines file."""
    path = tmp_path / "exported.jsonl"
    done = invoke_treadle("export", "jsonl", conversation, "--store", store, "-o", str(path))
    assert done.returncode == 0, done.stderr
    return path


def test_a_hook_blocks_rm_rf_in_a_real_run_and_the_log_audits_clean(tmp_path):
    workspace = workspace_with_data(tmp_path)
    store = f"sqlite:///{tmp_path / 'run.db'}"
    hooks = hook_file(tmp_path, str(guard(tmp_path)))
    done = invoke_treadle(
        "run", "tidy the workspace", "--create-workspace", "--workspace", str(workspace),
        "--script", str(script(tmp_path, [DELETE, FINISH])),
        "--hooks", str(hooks), "--store", store,
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "status: finished" in done.stdout
    assert (workspace / "data" / "keep.txt").read_text() == "precious"
    conversation, events = stored_events(store)
    (rejected,) = [e for e in events if e["kind"] == "user_rejection"]
    assert rejected["rejected_by"] == "hook"
    assert REASON in rejected["reason"]
    log = exported(tmp_path, store, conversation)
    stored = [json.loads(line) for line in log.read_text().splitlines()]
    (fact,) = [e["value"] for e in stored if e.get("key") == "hook"]
    assert fact["hook"] == "PreToolUse"
    assert (fact["exit_code"], fact["decision"]) == (2, "block")
    assert fact["action_id"] == rejected["action_id"]
    audit = invoke_treadle("audit", str(log))
    assert audit.returncode == 0, audit.stdout
    shown = invoke_treadle("log", conversation, "--store", store, columns=400)
    assert "hooks PreToolUse 1" in shown.stdout


def test_the_models_next_request_holds_the_hooks_reason(tmp_path):
    workspace = workspace_with_data(tmp_path)
    store = f"sqlite:///{tmp_path / 'run.db'}"
    hooks = hook_file(tmp_path, str(guard(tmp_path)))
    with FakeOpenAIServer([DELETE, {"text": "understood, nothing deleted"}]) as server:
        done = invoke_treadle(
            "run", "tidy the workspace", "--create-workspace", "--workspace", str(workspace),
            "--model", "openai/test-model", "--base-url", server.base_url,
            "--hooks", str(hooks), "--store", store,
            env={"TREADLE_API_KEY": "sk-test-hooks-0123456789"},
        )  # fmt: skip
        requests = [request["body"] for request in server.requests]
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(requests) == 2
    answer = requests[1]["messages"][-1]
    assert answer["role"] == "tool"
    assert REASON in answer["content"]
    assert answer["tool_call_id"] == requests[1]["messages"][-2]["tool_calls"][0]["id"]
    assert (workspace / "data" / "keep.txt").exists()


def test_a_hook_past_its_timeout_does_not_hang_the_run(tmp_path):
    workspace = workspace_with_data(tmp_path)
    store = f"sqlite:///{tmp_path / 'run.db'}"
    marker = "treadle-cli-hook-sleeper"
    hooks = hook_file(tmp_path, f"sleep 600 # {marker}", timeout=1)
    done = invoke_treadle(
        "run", "tidy", "--create-workspace", "--workspace", str(workspace),
        "--script", str(script(tmp_path, [DELETE, FINISH])),
        "--hooks", str(hooks), "--store", store, "--sandbox", "none",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _conversation, events = stored_events(store)
    (rejected,) = [e for e in events if e["kind"] == "user_rejection"]
    assert "timed out after 1 s" in rejected["reason"]
    assert host_pids_with(marker) == []


def test_workspace_hooks_are_ignored_and_said_so_unless_trusted(tmp_path):
    workspace = workspace_with_data(tmp_path)
    (workspace / ".treadle").mkdir()
    (workspace / ".treadle" / "settings.json").write_text(
        hook_file(tmp_path, "echo 'workspace says no' >&2; exit 2").read_text()
    )
    store = f"sqlite:///{tmp_path / 'run.db'}"
    args = ["--create-workspace", "--workspace", str(workspace), "--store", store]
    args += ["--sandbox", "none"]
    responses = [{"tool_calls": [{"name": "terminal", "arguments": {"command": "echo hi"}}]}]
    ignored = invoke_treadle(
        "run", "go", *args, "--script", str(script(tmp_path, [*responses, FINISH])),
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert ignored.returncode == 0, ignored.stdout + ignored.stderr
    assert "hooks ignored" in ignored.stdout
    assert "--trust-workspace-hooks" in ignored.stdout
    trusted = invoke_treadle(
        "run", "go", *args, "--script", str(script(tmp_path, [*responses, FINISH])),
        "--trust-workspace-hooks", "--store", f"sqlite:///{tmp_path / 'trusted.db'}",
    )  # fmt: skip
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert "hooks ignored" not in trusted.stdout
    _conversation, events = stored_events(f"sqlite:///{tmp_path / 'trusted.db'}")
    (rejected,) = [e for e in events if e["kind"] == "user_rejection"]
    assert rejected["reason"].endswith("workspace says no")


def test_a_bad_hooks_file_and_other_hooks_on_a_stored_conversation_exit_2(tmp_path):
    workspace = workspace_with_data(tmp_path)
    store = f"sqlite:///{tmp_path / 'run.db'}"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hooks": {"Notification": []}}))
    refused = invoke_treadle(
        "run", "go", "--create-workspace", "--workspace", str(workspace), "--script",
        str(script(tmp_path, [FINISH])), "--hooks", str(bad), "--store", store,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--hooks" in refused.stderr
    assert "'Notification' are not run by Treadle" in refused.stderr
    first = invoke_treadle(
        "run", "go", "--create-workspace", "--workspace", str(workspace), "--sandbox", "none", "--script",
        str(script(tmp_path, [FINISH])), "--store", store,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    conversation, _events = stored_events(store)
    other = invoke_treadle(
        "run", "more", "--conversation", conversation, "--store", store,
        "--hooks", str(hook_file(tmp_path, "true")),
    )  # fmt: skip
    assert other.returncode == 2
    assert "--hooks (the stored hooks differ)" in other.stderr


def test_a_task_a_userpromptsubmit_hook_blocks_exits_2_and_reaches_no_model(tmp_path):
    workspace = workspace_with_data(tmp_path)
    store = f"sqlite:///{tmp_path / 'run.db'}"
    entry = {"type": "command", "command": "echo 'no tasks on Sundays' >&2; exit 2"}
    hooks = tmp_path / "prompt.json"
    hooks.write_text(json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [entry]}]}}))
    done = invoke_treadle(
        "run", "tidy", "--create-workspace", "--workspace", str(workspace), "--sandbox", "none",
        "--script", str(script(tmp_path, [DELETE, FINISH])), "--hooks", str(hooks),
        "--store", store,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "blocked by a UserPromptSubmit hook: no tasks on Sundays" in done.stderr
    _conversation, events = stored_events(store)
    assert [e for e in events if e["kind"] in ("message", "action")] == []
