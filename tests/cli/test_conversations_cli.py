"""``treadle conversations``, ``treadle import jsonl`` and ``treadle log``'s totals as a user
runs them, on real SQLite and PostgreSQL stores."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli import invoke_treadle
from support.postgres import fresh_schema_url
from treadle.events.model import (
    ROOT,
    ActionEvent,
    MessageEvent,
    ObservationEvent,
    TokenUsage,
)
from treadle.runtime.status import ConversationStatus, head_move_event, status_event
from treadle.store.urls import open_store


def treadle(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return invoke_treadle(*args, stdin=stdin, columns=250)


def assert_clean_error(result: subprocess.CompletedProcess[str], code: int, *fragments: str):
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cli.db'}"
    else:
        with fresh_schema_url("treadle_cli") as schema_url:
            yield schema_url


def usage(prompt: int, completion: int, cost: float) -> TokenUsage:
    return TokenUsage(model="m", prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost)


def branched_log() -> list:
    """A run with two model calls on the active path, one on a branch left behind, a status
    and a branch switch back to the first answer; usages 100+10, 200+20, 400+40."""
    return [
        MessageEvent(id="u", source="user", text="fix it", parent_id=ROOT),
        ActionEvent(
            id="a1",
            llm_response_id="r1",
            tool_call_id="c1",
            tool_name="think",
            arguments={"thought": "t"},
            raw_arguments='{"thought": "t"}',
            thought='a text holding "usage":{ in quotes',
            usage=usage(100, 10, 0.01),
            parent_id="u",
        ),
        ObservationEvent(
            id="o1",
            action_id="a1",
            tool_call_id="c1",
            tool_name="think",
            content='{"usage":{"prompt_tokens": 999999}}',
            parent_id="a1",
        ),
        MessageEvent(id="m1", source="agent", text="done", usage=usage(200, 20, 0.02)),
        MessageEvent(
            id="m2", source="agent", text="other", usage=usage(400, 40, 0.04), parent_id="o1"
        ),
        status_event(ConversationStatus.FINISHED, "m2", "the agent answered"),
        head_move_event("m1"),
    ]


def seed(url: str) -> None:
    store = open_store(url)
    try:
        store.create_conversation(
            "spent",
            title="[bold]a title[/]",
            metadata={"settings": {"model": {"kind": "litellm", "model": "openai/x"}}},
        )
        store.append_batch("spent", branched_log(), move_head=False)
        store.set_head("spent", "m1")
        store.create_conversation("quiet", title="nothing yet")
        store.create_conversation("crashed", title="its runner died")
        store.append_batch(
            "crashed",
            [
                MessageEvent(id="x", source="user", text="go", parent_id=ROOT),
                status_event(ConversationStatus.RUNNING, "x"),
            ],
        )
    finally:
        store.close()


def test_conversations_lists_status_events_tokens_cost_and_last_activity(url: str) -> None:
    seed(url)
    listed = treadle("conversations", "--store", url, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == {"spent", "quiet", "crashed"}
    spent = rows["spent"]
    # every model call of the log, the branch left behind included; text that merely holds
    # the word "usage" (a thought, a tool's output) is not counted
    assert (spent["prompt_tokens"], spent["completion_tokens"]) == (700, 70)
    assert spent["tokens"] == 770
    assert spent["cost_usd"] == pytest.approx(0.07)
    assert spent["events"] == 7
    assert spent["status"] == "finished"
    assert spent["status_reason"] == "the agent answered"
    assert spent["title"] == "[bold]a title[/]"
    assert spent["head_id"] == "m1"
    assert spent["last_activity"]
    assert rows["quiet"] | {"last_activity": None, "created_at": None} == {
        "id": "quiet",
        "title": "nothing yet",
        "status": "idle",
        "status_reason": None,
        "events": 0,
        "tokens": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
        "last_activity": None,
        "created_at": None,
        "head_id": None,
    }
    # "running" with nobody holding its run lease: the process died, say so
    assert rows["crashed"]["status"] == "running"
    assert rows["crashed"]["status_reason"].startswith("interrupted: ")

    table = treadle("conversations", "--store", url)
    assert table.returncode == 0, table.stderr
    assert "3 conversation(s)" in table.stdout
    assert "[bold]a title[/]" in table.stdout  # printed as text, not markup
    assert "770" in table.stdout
    assert "$0.0700" in table.stdout
    # The reason goes under the table (long text out of the narrow status column).
    assert "spent finished: the agent answered" in table.stdout


def test_conversations_limit_keeps_the_most_recently_active(url: str) -> None:
    seed(url)
    store = open_store(url)
    store.append("quiet", MessageEvent(id="late", source="user", text="hi", parent_id=ROOT))
    store.close()
    listed = treadle("conversations", "--store", url, "--json", "--limit", "1")
    assert listed.returncode == 0, listed.stderr
    assert [row["id"] for row in json.loads(listed.stdout)] == ["quiet"]
    assert "1 of 3 shown" in listed.stderr


def test_conversations_on_a_missing_store_exits_2(tmp_path: Path) -> None:
    result = treadle("conversations", "--store", f"sqlite:///{tmp_path / 'none.db'}")
    assert_clean_error(result, 2)
    assert not (tmp_path / "none.db").exists()  # a reading command never makes a store


def test_log_shows_totals_and_settings_and_its_json_stays_an_array(url: str) -> None:
    seed(url)
    human = treadle("log", "spent", "--store", url)
    assert human.returncode == 0, human.stderr
    assert "whole log: 7 event(s); tokens 700 in / 70 out; cost $0.0700" in human.stdout
    assert "settings: model openai/x" in human.stdout
    assert "status: finished (the agent answered)" in human.stdout
    as_json = treadle("log", "spent", "--store", url, "--json")
    assert [event["id"] for event in json.loads(as_json.stdout)] == ["u", "a1", "o1", "m1"]
    bare = treadle("log", "quiet", "--store", url)
    assert "settings: none stored" in bare.stdout


def stored_events(url: str, conversation_id: str) -> list[str]:
    store = open_store(url)
    try:
        info = store.get_conversation(conversation_id)
        return [
            json.dumps(item.event.model_dump(mode="json"), sort_keys=True)
            for item in store.get_range(conversation_id, 0, info.event_count)
        ]
    finally:
        store.close()


def test_export_then_import_then_export_gives_the_same_events(url: str, tmp_path: Path) -> None:
    seed(url)
    first = tmp_path / "first.jsonl"
    assert treadle("export", "jsonl", "spent", "--store", url, "-o", str(first)).returncode == 0
    imported = treadle("import", "jsonl", str(first), "--store", url, "--title", "copy")
    assert imported.returncode == 0, imported.stderr
    new_id = imported.stdout.strip()
    assert new_id
    assert new_id != "spent"
    again = treadle("export", "jsonl", new_id, "--store", url)
    assert again.stdout == first.read_text()
    assert stored_events(url, new_id) == stored_events(url, "spent")
    store = open_store(url)
    info = store.get_conversation(new_id)
    store.close()
    assert info.title == "copy"
    assert info.head_id == "m1"  # the recorded branch switch, not the last event appended
    assert info.metadata["origin"]["format"] == "jsonl"
    listed = {
        row["id"]: row
        for row in json.loads(treadle("conversations", "--store", url, "--json").stdout)
    }
    assert listed[new_id]["tokens"] == listed["spent"]["tokens"]


def test_import_from_stdin_with_an_id_then_the_id_is_taken(url: str) -> None:
    lines = "\n".join(
        json.dumps(e.model_dump(mode="json", exclude_none=True)) for e in branched_log()[:3]
    )
    first = treadle("import", "jsonl", "-", "--store", url, "--id", "mine", stdin=lines)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "mine"
    second = treadle("import", "jsonl", "-", "--store", url, "--id", "mine", stdin=lines)
    assert_clean_error(second, 2, "'mine' is already in store")
    bad_id = treadle("import", "jsonl", "-", "--store", url, "--id", "a b/c", stdin=lines)
    assert_clean_error(bad_id, 2, "is not allowed")
    assert stored_events(url, "mine")
    assert len(stored_events(url, "mine")) == 3


def _line(**fields: object) -> str:
    base = {"timestamp": "2025-01-01T00:00:00Z", "source": "user", "kind": "message"}
    return json.dumps(base | fields)


@pytest.mark.parametrize(
    ("lines", "code", "words"),
    [
        ([_line(id="a", text="x"), _line(id="a", text="y")], 1, "APPEND-DUP-ID"),
        ([_line(id="a", text="x", parent_id="ghost")], 1, "TREE-MISSING"),
        (
            [_line(id="a", text="x", parent_id="b"), _line(id="b", text="y", parent_id="a")],
            1,
            "TREE-",
        ),
        ([json.dumps({"kind": "message", "source": "user", "id": "a"})], 2, "timestamp"),
        (['{"kind": "message", "id": "a", "timestamp": ' + "[" * 300 + "]" * 300 + "}"], 2, ""),
        (["not json"], 2, "not JSON"),
    ],
)
def test_import_refuses_a_log_the_store_cannot_hold_and_stores_nothing(
    url: str, tmp_path: Path, lines: list[str], code: int, words: str
) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text("\n".join(lines) + "\n")
    result = treadle("import", "jsonl", str(log), "--store", url)
    assert_clean_error(result, code, words)
    assert len(result.stderr.strip().splitlines()) == 1
    store = open_store(url)
    try:
        assert store.list_conversations() == []
    finally:
        store.close()


def test_import_of_a_folder_or_a_missing_file_is_bad_input(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert_clean_error(treadle("import", "jsonl", str(tmp_path), "--store", url), 2, "folder")
    missing = treadle("import", "jsonl", str(tmp_path / "none.jsonl"), "--store", url)
    assert_clean_error(missing, 2, "cannot read")
