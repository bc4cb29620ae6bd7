"""An OpenHands SDK conversation imported into a store is continued with ``treadle run
--conversation`` (settings given on the command line, stored with it), audits clean, and
exports back to a folder with the shape of the SDK's own (support/sdk_format.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import run_treadle
from support.openhands_folders import CONVERSATIONS, copy_conversation, event_files, read_json
from support.scripts import write_script
from support.sdk_format import sdk_format_problems
from treadle.events.audit import audit_events
from treadle.runtime.status import read_status
from treadle.store.urls import open_store


def treadle(*args: str):
    return run_treadle(*args, columns=200, drop=("TREADLE_STORE", "TREADLE_MODEL"))


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_the_sdk_fixtures_have_the_sdk_shape(name: str) -> None:
    assert sdk_format_problems(CONVERSATIONS[name]) == []


def test_the_format_checks_find_what_the_sdk_would_not_read(tmp_path: Path) -> None:
    folder = copy_conversation("parallel_calls", tmp_path / "broken")
    files = event_files(folder)
    first = files[1]
    second = next(file for file in files if read_json(file)["kind"] == "ActionEvent")
    action = read_json(second)
    del action["tool_call"]
    action["from_elsewhere"] = 1
    second.write_text(json.dumps(action))
    first.rename(first.with_name(first.name.replace("event-00001", "event-00009")))
    problems = sdk_format_problems(folder)
    assert any("lacks ['tool_call']" in problem for problem in problems), problems
    assert any("never writes ['from_elsewhere']" in problem for problem in problems)
    assert any("not event-00001-<id>.json" in problem for problem in problems)


def test_an_imported_sdk_conversation_is_continued_and_exports_in_the_sdk_shape(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    source = CONVERSATIONS["parallel_calls"]
    imported = treadle("import", "openhands", str(source), "--store", url)
    assert imported.returncode == 0, imported.stderr
    conversation_id = imported.stdout.strip()

    refused = treadle("run", "carry on", "--conversation", conversation_id, "--store", url)
    assert refused.returncode == 2
    assert "has no stored settings (was it imported?)" in refused.stderr

    # A scripted model answers by position on the active path: the imported answers count.
    script = write_script(
        tmp_path,
        [
            {"text": "(answered in the SDK)"},
            {"text": "(answered in the SDK)"},
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo continued"}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"message": "carried on"}}]},
        ],
    )
    workspace = tmp_path / "ws"
    done = treadle(
        "run", "carry on", "--conversation", conversation_id, "--workspace", str(workspace),
        "--script", str(script), "--store", url,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr

    store = open_store(url)
    try:
        info = store.get_conversation(conversation_id)
        events = [item.event for item in store.get_range(conversation_id, 0, info.event_count)]
        status, _reason = read_status(store, conversation_id)
        head = store.head(conversation_id)
    finally:
        store.close()
    assert status.value == "finished"
    assert info.metadata["settings"]["workspace"] == str(workspace.resolve())
    report = audit_events(events)
    assert report.clean, report.to_json_dict()["violations"]
    results = [e.content for e in events if e.kind == "observation"]
    assert results[-2].startswith("continued")

    out = tmp_path / "exported"
    exported = treadle("export", "openhands", conversation_id, str(out), "--store", url)
    assert exported.returncode == 0, exported.stderr
    assert sdk_format_problems(out) == []
    assert len(event_files(out)) == len(events)
    assert read_json(out / "base_state.json")["leaf_event_id"] == head
    # What the SDK wrote comes back as it was, byte for byte.
    for file in event_files(source):
        assert (out / "events" / file.name).read_bytes() == file.read_bytes()
