"""``treadle run --condense auto|off --context-tokens N`` as a user runs it: the settings are
stored, a long scripted run condenses and finishes, ``treadle log`` shows the condensations and
every forgotten event, ``treadle audit`` finds the log clean, and a continued run keeps its
stored condense settings."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import invoke_treadle
from support.scripts import think_steps, write_script


def test_a_condensing_run_from_the_command_line(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    script = write_script(tmp_path, think_steps(60))
    workspace = str(tmp_path / "ws")
    result = invoke_treadle(
        "run", "think", "--create-workspace", "--workspace", workspace, "--script", str(script),
        "--context-tokens", "1800", "--store", store, "--max-steps", "100",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "condensation: forgets" in result.stdout
    (listed,) = json.loads(invoke_treadle("conversations", "--json", "--store", store).stdout)
    conversation = listed["id"]
    # The summary calls' tokens count in the conversation's totals.
    assert listed["prompt_tokens"] > 0
    shown = invoke_treadle("log", conversation, "--store", store, columns=400)
    assert shown.returncode == 0, shown.stderr
    assert "forgets" in shown.stdout
    assert "condense auto at 1800 tokens" in shown.stdout
    events = json.loads(invoke_treadle("log", conversation, "--json", "--store", store).stdout)
    condensations = [e for e in events if e["kind"] == "condensation"]
    assert condensations
    responses = sum(e["usage"]["prompt_tokens"] for e in events if e["kind"] == "action")
    summary_tokens = sum(c["usage"]["prompt_tokens"] for c in condensations)
    assert summary_tokens > 0
    assert listed["prompt_tokens"] == responses + summary_tokens
    # Every event any condensation forgot is still on the path the log shows.
    ids = {e["id"] for e in events}
    forgotten = {i for c in condensations for i in c["forgotten_event_ids"]}
    assert forgotten - ids <= {f"{c['id']}-summary" for c in condensations}
    assert len([e for e in events if e["kind"] == "action"]) == 61
    exported = tmp_path / "log.jsonl"
    invoke_treadle("export", "jsonl", conversation, "--store", store, "-o", str(exported))
    audit = invoke_treadle("audit", str(exported), "--json")
    assert audit.returncode == 0, audit.stdout
    assert json.loads(audit.stdout)["violations"] == []
    # A continued run keeps its stored settings: another budget is refused, naming it.
    other = invoke_treadle(
        "run", "--conversation", conversation, "--context-tokens", "900", "--store", store
    )
    assert other.returncode == 2
    assert "--context-tokens (stored: 1800)" in other.stderr


def test_condense_off_is_stored_and_sends_everything(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    script = write_script(tmp_path, think_steps(30))
    result = invoke_treadle(
        "run", "think", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(script),
        "--condense", "off", "--context-tokens", "600", "--store", store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "condensation" not in result.stdout
    bad = invoke_treadle(
        "run", "x", "--create-workspace", "--workspace", str(tmp_path / "ws"), "--script", str(script),
        "--condense", "sometimes", "--store", store,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "sometimes" in bad.stderr
