"""``treadle run --max-total-tokens N`` as a user runs it: the run pauses when the budget is
reached (exit 3, the reason naming the budget and the figures), a continued run may raise the
budget (never lower it: exit 2) and then finishes; ``treadle log`` and ``treadle conversations``
show the totals beside the budget."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import invoke_treadle
from support.scripts import think_steps, write_script


def test_a_token_budget_pauses_and_a_raise_continues(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    script = write_script(tmp_path, think_steps(10))
    workspace = str(tmp_path / "ws")
    first = invoke_treadle(
        "run", "think", "--create-workspace", "--workspace", workspace, "--script", str(script),
        "--max-total-tokens", "2000", "--store", store, columns=400,
    )  # fmt: skip
    assert first.returncode == 3, first.stdout + first.stderr
    assert "budget reached: max_total_tokens 2,000 (used " in first.stdout
    (listed,) = json.loads(invoke_treadle("conversations", "--json", "--store", store).stdout)
    conversation = listed["id"]
    assert listed["status"] == "paused"
    assert listed["prompt_tokens"] + listed["completion_tokens"] >= 2000
    assert listed["status_reason"].startswith("budget reached: max_total_tokens 2,000")
    table = invoke_treadle("conversations", "--store", store, columns=400)
    assert f"{listed['prompt_tokens'] + listed['completion_tokens']:,} of 2,000" in table.stdout
    # Running again as it is pauses again at once: no model call is made.
    again = invoke_treadle("run", "--conversation", conversation, "--store", store)
    assert again.returncode == 3, again.stdout + again.stderr
    events = json.loads(invoke_treadle("log", conversation, "--json", "--store", store).stdout)
    actions_before = sum(1 for e in events if e["kind"] == "action")
    # A lower budget, or another setting, is refused: the conversation is left as it was.
    lower = invoke_treadle(
        "run", "--conversation", conversation, "--max-total-tokens", "1000", "--store", store
    )
    assert lower.returncode == 2
    assert "max_total_tokens can only be raised" in lower.stderr
    other = invoke_treadle(
        "run", "--conversation", conversation, "--max-total-tokens", "90000",
        "--context-tokens", "900", "--store", store,
    )  # fmt: skip
    assert other.returncode == 2
    assert "--context-tokens" in other.stderr
    raised = invoke_treadle(
        "run", "--conversation", conversation, "--max-total-tokens", "100000", "--store", store,
        columns=400,
    )  # fmt: skip
    assert raised.returncode == 0, raised.stdout + raised.stderr
    assert "max_total_tokens raised from 2000 to 100000" in raised.stdout
    events = json.loads(invoke_treadle("log", conversation, "--json", "--store", store).stdout)
    assert sum(1 for e in events if e["kind"] == "action") == 11 > actions_before
    exported = tmp_path / "log.jsonl"  # the whole log: state changes sit beside the path
    invoke_treadle("export", "jsonl", conversation, "--store", store, "-o", str(exported))
    every = [json.loads(line) for line in exported.read_text().splitlines()]
    budget_facts = [
        e["value"] for e in every if e["kind"] == "state_change" and e["key"] == "budget"
    ]
    assert budget_facts == [{"max_total_tokens": {"from": 2000, "to": 100000}}]
    shown = invoke_treadle("log", conversation, "--store", store, columns=400)
    assert "budget max 100000 tokens" in shown.stdout
    assert "whole log: " in shown.stdout
    audit = invoke_treadle("audit", str(exported))
    assert audit.returncode == 0, audit.stdout + audit.stderr
