"""``treadle run`` with a scripted model and ``treadle demo``, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from treadle.events.audit import audit_events
from treadle.store.urls import open_store


def treadle(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "treadle", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {}), "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,
    )


def test_run_with_a_script_shows_events_and_a_summary(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [
                    {
                        "tool_calls": [
                            {
                                "name": "terminal",
                                "arguments": {
                                    "command": "echo $TREADLE_API_KEY; echo made > out.txt"
                                },
                            }
                        ]
                    },
                    {"tool_calls": [{"name": "finish", "arguments": {"message": "wrote out.txt"}}]},
                ]
            }
        )
    )
    workspace = tmp_path / "ws"
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    result = treadle(
        "run",
        "write out.txt",
        "--workspace",
        str(workspace),
        "--script",
        str(script),
        "--store",
        store_url,
        env={"TREADLE_API_KEY": "sk-never-stored-123"},
    )
    assert result.returncode == 0, result.stderr
    assert "status: finished" in result.stdout
    assert "observation" in result.stdout
    assert (workspace / "out.txt").read_text() == "made\n"
    assert "sk-never-stored-123" not in result.stdout
    store = open_store(store_url)
    (info,) = store.list_conversations()
    events = [item.event for item in store.get_range(info.id, 0, 1000)]
    store.close()
    assert audit_events(events).clean
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert "sk-never-stored-123" not in dumped
    assert "<secret:TREADLE_API_KEY>" not in dumped  # the model's key never reaches bash
    assert info.metadata["settings"]["model"]["kind"] == "scripted"


def test_run_without_a_model_is_a_clear_error(tmp_path):
    result = treadle(
        "run",
        "x",
        "--workspace",
        str(tmp_path),
        "--store",
        f"sqlite:///{tmp_path / 'x.db'}",
        env={"TREADLE_MODEL": ""},
    )
    assert result.returncode == 2
    assert "--model" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_runs_offline_and_ends_clean(tmp_path):
    result = treadle("demo", "--store", f"sqlite:///{tmp_path / 'demo.db'}")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "pending now" in out  # the second call confirmed first: the first still pending
    assert "agent_error" in out
    assert "clean: 0 violations" in out
    assert "5 actions in, 5 calls out" in out
    assert "status: finished" in out
