"""``treadle run --sandbox/--network/--mount-ro``: the default is bubblewrap with the network off,
what the tools ran under is recorded at the start of each run and shown by the summary and
``treadle log``; a sandboxed conversation is continued unsandboxed only by an explicit
``--sandbox none``, itself recorded; a sandbox that cannot start refuses the run (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import run_treadle
from treadle.data.isolation import ISOLATION_KEY
from treadle.data.settings import SandboxSettings
from treadle.runtime.workspace import SandboxedWorkspace, SandboxUnavailable, check_bubblewrap
from treadle.store.urls import open_store

try:
    check_bubblewrap()
except Exception as problem:  # CI installs bubblewrap (make test)
    pytest.skip(f"bubblewrap cannot run here: {problem}", allow_module_level=True)

READ_HOME = {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo $HOME"}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def script(tmp_path: Path, name: str, responses: list[dict]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"responses": responses}))
    return path


def isolation_facts(store_url: str) -> list[dict]:
    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
        events = [item.event for item in store.get_range(info.id, 0, 10**6)]
    finally:
        store.close()
    return [dict(e.value) for e in events if e.kind == "state_change" and e.key == ISOLATION_KEY]


def test_the_default_is_a_sandbox_and_an_unsandboxed_continuation_is_explicit_and_recorded(
    tmp_path,
):
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    workspace = str(tmp_path / "ws")
    first = script(tmp_path, "first.json", [READ_HOME, FINISH] * 3)  # three runs
    ran = run_treadle(
        "run",
        "go",
        "--create-workspace",
        "--workspace",
        workspace,
        "--script",
        str(first),
        "--store",
        store_url,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "/home/sandbox" in ran.stdout  # the private HOME
    assert "isolation: bubblewrap, network off" in ran.stdout
    (fact,) = isolation_facts(store_url)
    assert fact["sandbox"] == "bubblewrap"
    assert fact["network"] == "off"
    assert fact["override"] is None
    store = open_store(store_url)
    try:
        conversation_id = store.list_conversations()[0].id
    finally:
        store.close()

    # Continuing it without a sandbox takes --sandbox none, and the log says so.
    again = run_treadle(
        "run", "again", "--conversation", conversation_id, "--sandbox", "none", "--store", store_url
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "no sandbox" in again.stdout
    assert "/home/sandbox" not in again.stdout
    facts = isolation_facts(store_url)
    assert len(facts) == 2
    assert facts[1]["sandbox"] == "none"
    assert "the conversation's settings ask for sandbox bubblewrap" in facts[1]["override"]

    shown = run_treadle("log", conversation_id, "--store", store_url, columns=300)
    assert shown.returncode == 0, shown.stderr
    assert "isolation (last run): no sandbox" in shown.stdout
    assert "sandbox bubblewrap, network off" in shown.stdout  # the stored settings kept theirs

    # Without the option, the next run is sandboxed again.
    third = run_treadle("run", "more", "--conversation", conversation_id, "--store", store_url)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "/home/sandbox" in third.stdout
    assert isolation_facts(store_url)[-1]["sandbox"] == "bubblewrap"
    shown = run_treadle("log", conversation_id, "--store", store_url, columns=300)
    assert "1 earlier run(s) had no sandbox" in shown.stdout


def test_sandbox_none_runs_as_the_user(tmp_path):
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    steps = script(tmp_path, "s.json", [READ_HOME, FINISH])
    ran = run_treadle(
        "run", "go", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(steps),
        "--sandbox", "none", "--store", store_url,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "/home/sandbox" not in ran.stdout
    (fact,) = isolation_facts(store_url)
    assert fact["sandbox"] == "none"
    assert set(fact["limits"].values()) == {None}  # recorded as unlimited


def test_a_sandbox_that_cannot_start_refuses_the_run_with_exit_2(tmp_path):
    steps = script(tmp_path, "s.json", [FINISH])
    ran = run_treadle(
        "run", "go", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(steps),
        "--mount-ro", str(tmp_path / "missing"), "--store", f"sqlite:///{tmp_path / 'r.db'}",
    )  # fmt: skip
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "no such path" in ran.stderr
    assert "Traceback" not in ran.stderr
    mixed = run_treadle(
        "run", "go", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(steps),
        "--sandbox", "none", "--mount-ro", "/opt", "--store", f"sqlite:///{tmp_path / 'r.db'}",
    )  # fmt: skip
    assert mixed.returncode == 2
    assert "mounts_ro applies to a sandbox only" in mixed.stderr


def test_a_missing_bubblewrap_says_why_and_how_to_fix_it(tmp_path):
    with pytest.raises(SandboxUnavailable) as refused:
        SandboxedWorkspace(tmp_path, SandboxSettings(), bwrap=str(tmp_path / "no-bwrap"))
    message = str(refused.value)
    assert "bubblewrap is not installed" in message
    assert "apt-get install bubblewrap" in message
    assert "--sandbox none" in message


def test_run_with_an_allow_list_records_it_and_refuses_a_bad_one(tmp_path):
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    workspace = str(tmp_path / "ws")
    probe = {
        "tool_calls": [
            {"name": "terminal", "arguments": {"command": "curl -sS http://127.0.0.1:9/ ; echo"}}
        ]
    }
    ran = run_treadle(
        "run",
        "go",
        "--create-workspace",
        "--workspace",
        workspace,
        "--script",
        str(script(tmp_path, "probe.json", [probe, FINISH])),
        "--network",
        "allow=PyPI.org,127.0.0.1:8080",
        "--store",
        store_url,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "isolation: bubblewrap, network allow=pypi.org,127.0.0.1:8080" in ran.stdout
    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
        events = [item.event for item in store.get_range(info.id, 0, 10**6)]
    finally:
        store.close()
    seen = next(e.content for e in events if e.kind == "observation")
    assert "127.0.0.1:9 is not allowed (network allow=pypi.org,127.0.0.1:8080)" in seen
    (fact,) = isolation_facts(store_url)
    assert fact["network"] == "allow=pypi.org,127.0.0.1:8080"

    for bad, said in [
        ("allow=127.0.0.1", "name the port to allow"),
        ("sometimes", "give off, on or allow="),
    ]:
        refused = run_treadle(
            "run", "go", "--create-workspace", "--workspace", workspace, "--script", str(tmp_path / "probe.json"),
            "--network", bad, "--store", store_url,
        )  # fmt: skip
        assert refused.returncode == 2
        assert said in _flat(refused.stdout + refused.stderr)
    unsandboxed = run_treadle(
        "run", "go", "--create-workspace", "--workspace", workspace, "--script", str(tmp_path / "probe.json"),
        "--network", "allow=pypi.org", "--sandbox", "none", "--store", store_url,
    )  # fmt: skip
    assert unsandboxed.returncode == 2
    assert "applies to a sandbox only" in _flat(unsandboxed.stdout + unsandboxed.stderr)


def _flat(text: str) -> str:
    """Rich's error box, its borders and line breaks removed."""
    return " ".join(text.replace("│", " ").split())
