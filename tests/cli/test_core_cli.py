"""The seed's worked examples through the real ``treadle`` command, and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import invoke_treadle, run_treadle

SEED = Path(__file__).resolve().parents[2] / "examples" / "seed"
WHO = '"id":"a","timestamp":"2026-01-01T00:00:00+00:00"'
"""The identity every event read needs, for cases about other fields."""


def treadle(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI run in this process (these tests are about what it prints, not the process;
    tests/cli/test_startup.py and the examples script run it as a process)."""
    return invoke_treadle(*args, stdin=stdin, drop=())


def test_example_1_path_follows_the_head_only():
    result = treadle("path", str(SEED / "1_branches.jsonl"), "--head", "new")
    assert result.returncode == 0, result.stderr
    assert [e["id"] for e in json.loads(result.stdout)] == ["root", "a", "new"]
    result = treadle("path", str(SEED / "1_branches.jsonl"), "--head", "new", "--limit", "2")
    assert [e["id"] for e in json.loads(result.stdout)] == ["a", "new"]


def test_example_2_one_assistant_message_with_both_calls():
    raw = treadle("project", str(SEED / "3_out_of_order.jsonl"), "--raw")
    assert raw.returncode == 0, raw.stderr
    messages = json.loads(raw.stdout)
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert len(assistant) == 1
    assert [c["id"] for c in assistant[0]["tool_calls"]] == ["cx", "cy"]

    answered = json.loads(treadle("project", str(SEED / "2_parallel_calls.jsonl")).stdout)
    assert [m["role"] for m in answered] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in answered[1]["tool_calls"]] == ["cx", "cy"]
    assert {m["tool_call_id"] for m in answered[2:]} == {"cx", "cy"}


def test_example_2_unanswered_response_is_not_sent_to_the_model():
    messages = json.loads(treadle("project", str(SEED / "3_out_of_order.jsonl")).stdout)
    assert [m["role"] for m in messages] == ["user"]


def test_example_3_pending_is_exactly_x():
    result = treadle("audit", str(SEED / "3_out_of_order.jsonl"), "--json")
    assert result.returncode == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["pending"] == ["x"]
    assert report["violations"] == []
    assert report["counts"] == {"message": 1, "action": 2, "observation": 1}


@pytest.mark.parametrize(
    ("file", "contract"),
    [
        ("4a_missing_parent.jsonl", "TREE-MISSING"),
        ("4b_cycle.jsonl", "TREE-CYCLE"),
        ("4c_dup_call_in_response.jsonl", "PROJECT-DUP-CALL"),
        ("4d_dup_call_across_responses.jsonl", "LINK-UNIQUE"),
        ("4e_wrong_action.jsonl", "LINK-ID"),
    ],
)
def test_example_4_each_fault_is_named_and_exits_1(file, contract):
    result = treadle("audit", str(SEED / file), "--json")
    assert result.returncode == 1
    contracts = {v["contract"] for v in json.loads(result.stdout)["violations"]}
    assert contract in contracts
    human = treadle("audit", str(SEED / file))
    assert human.returncode == 1
    assert contract in human.stdout


def test_clean_log_exits_0():
    result = treadle("audit", str(SEED / "2_parallel_calls.jsonl"))
    assert result.returncode == 0
    assert "clean" in result.stdout


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"kind":"message","source":"user","text":"a",' + WHO + "}\nnot json\n", "line 2"),
        ('{"kind":"wizard","source":"user"}\n', "unknown kind 'wizard'"),
        ('{"kind":"message","source":"user","text":7,' + WHO + "}\n", "field 'text'"),
    ],
)
def test_bad_input_exits_2_with_line_and_field_and_no_traceback(text, words):
    for command in ("audit", "path", "project"):
        result = treadle(command, "-", stdin=text)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert words in result.stderr
        assert "Traceback" not in result.stderr


def test_missing_file_and_unknown_head_exit_2(tmp_path):
    result = treadle("audit", str(tmp_path / "nope.jsonl"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr
    result = treadle("path", str(SEED / "1_branches.jsonl"), "--head", "zzz")
    assert result.returncode == 2
    assert "TREE-HEAD" in result.stderr


def test_path_through_a_broken_tree_exits_1_naming_the_contract():
    result = treadle("path", str(SEED / "4b_cycle.jsonl"), "--head", "q")
    assert result.returncode == 1
    assert "TREE-CYCLE" in result.stderr


def test_schema_is_json_schema_of_all_kinds():
    result = treadle("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert "action" in json.dumps(schema["discriminator"]["mapping"])


def test_the_examples_script_runs_every_worked_example_as_the_seed_says():
    cli = Path(sys.executable).parent / "treadle"
    result = subprocess.run(
        ["bash", str(SEED / "demo.sh"), str(cli)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-2000:]
    assert "All worked examples behaved as the seed says." in result.stdout


# -- hostile files (issue 10, items 10 and 11) -----------------------------------------------

EVENT = '{"kind":"state_change","key":"k",' + WHO


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (EVENT + ',"value":' + "[" * 600 + "]" * 600 + "}", "line 1, field 'value'"),
        (EVENT + ',"value":' + "9" * 4400 + "}", "line 1, field 'value': an integer of more"),
        ('{"kind":"pause","timestamp":"2026-01-01T00:00:00+00:00"}', "line 1, field 'id'"),
        ('{"kind":"pause","id":"p"}', "line 1, field 'timestamp': missing field"),
    ],
)
def test_hostile_lines_exit_2_naming_line_and_field(line, words):
    for command in ("audit", "path", "project"):
        result = treadle(command, "-", stdin=line + "\n")
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert words in result.stderr
        assert "Traceback" not in result.stderr


def test_path_and_project_refuse_a_duplicate_id_as_audit_does(tmp_path):
    log = tmp_path / "dup.jsonl"
    first = '{"kind":"message","source":"user","text":"one",' + WHO + "}"
    log.write_text(first + "\n" + first.replace('"one"', '"two"') + "\n")
    for command in ("audit", "path", "project"):
        result = treadle(command, str(log))
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert "APPEND-DUP-ID" in result.stdout + result.stderr
        assert "Traceback" not in result.stderr


def test_a_device_or_fifo_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "zero").symlink_to("/dev/zero")
    for name in ("/dev/zero", str(fifo), str(tmp_path / "zero")):
        # a process: a hang or an unbounded read fails by its timeout
        result = run_treadle("audit", name, drop=())
        assert result.returncode == 2, (name, result.stderr)
        assert "not a regular file" in result.stderr


def test_markup_in_a_log_is_printed_as_text(tmp_path):
    log = tmp_path / "markup.jsonl"
    log.write_text(
        '{"kind":"message","source":"user","id":"[/]x[bold]","parent_id":"[/]gone",'
        '"timestamp":"2026-01-01T00:00:00+00:00"}\n'
    )
    result = treadle("audit", str(log))
    assert result.returncode == 1, result.stderr
    assert "[/]gone" in result.stdout
