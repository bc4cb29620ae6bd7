"""Broken conversation folders: every problem names its files, and a folder the store cannot
hold is not imported at all (the next one is)."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest
from typer.testing import CliRunner

from support.openhands_folders import copy_conversation, event_files, read_json, write_json
from treadle.cli import app
from treadle.store.base import ConversationNotFound
from treadle.store.openhands import import_conversation, read_conversation_folder
from treadle.store.urls import open_store


@pytest.fixture
def store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield opened
    opened.close()


@pytest.fixture
def folder(tmp_path):
    return copy_conversation("parallel_calls", tmp_path / "conversation")


def relative(path):
    return f"events/{path.name}"


def set_field(path, **fields):
    data = read_json(path)
    data.update(fields)
    write_json(path, data)


def duplicate_id(folder):
    """A later file repeats the id of event 2 (its name says so too)."""
    files = event_files(folder)
    event_id = read_json(files[2])["id"]
    copy = folder / "events" / f"event-{len(files):05d}-{event_id}.json"
    shutil.copyfile(files[2], copy)
    return [relative(files[2]), relative(copy)]


def missing_parent(folder):
    files = event_files(folder)
    set_field(files[4], parent_id=str(uuid.uuid4()))
    return [relative(files[4])]


def cycle(folder):
    """Event 1's parent becomes event 2, whose parent is event 1."""
    files = event_files(folder)
    set_field(files[1], parent_id=read_json(files[2])["id"])
    return [relative(files[1]), relative(files[2])]


def truncated(folder):
    files = event_files(folder)
    text = files[3].read_text()
    files[3].write_text(text[: len(text) // 2])
    return [relative(files[3])]


def index_gap(folder):
    files = event_files(folder)
    last = files[-1]
    moved = last.with_name(last.name.replace(f"{len(files) - 1:05d}", f"{len(files) + 4:05d}"))
    last.rename(moved)
    return [relative(moved)]


BREAKAGES = {
    "APPEND-DUP-ID": duplicate_id,
    "TREE-MISSING": missing_parent,
    "TREE-CYCLE": cycle,
    "OPENHANDS-UNREADABLE": truncated,
    "OPENHANDS-INDEX-GAP": index_gap,
}


@pytest.mark.parametrize("code", sorted(BREAKAGES))
def test_a_broken_folder_is_named_and_not_imported(code, folder, store):
    files = BREAKAGES[code](folder)
    result = import_conversation(store, folder)
    assert not result.imported
    problem = next(problem for problem in result.problems if problem.code == code)
    assert set(files) <= set(problem.files)
    with pytest.raises(ConversationNotFound):
        store.get_conversation(result.conversation_id)


@pytest.mark.parametrize("code", sorted(BREAKAGES))
def test_audit_of_a_broken_folder_names_the_files(code, folder):
    files = BREAKAGES[code](folder)
    result = CliRunner().invoke(app, ["audit", str(folder), "--json"])
    report = json.loads(result.stdout)
    if code.startswith("OPENHANDS-"):  # the folder itself is bad input
        assert result.exit_code == 2
        problem = next(p for p in report["problems"] if p["code"] == code)
        assert set(files) <= set(problem["files"])
    else:  # readable, but breaks a contract the audit names
        assert result.exit_code == 1, result.stderr
        violation = next(v for v in report["violations"] if v["contract"] == code)
        assert set(files) <= set(violation["files"])


def test_path_and_project_refuse_a_folder_with_unreadable_files(folder):
    (name,) = truncated(folder)
    for command in ("path", "project"):
        result = CliRunner().invoke(app, [command, str(folder)])
        assert result.exit_code == 2
        assert name in result.stderr


def test_an_event_named_for_another_id(folder):
    file = event_files(folder)[3]
    set_field(file, id=str(uuid.uuid4()))
    problems = read_conversation_folder(folder).problems
    assert [p.code for p in problems] == ["OPENHANDS-FILE-ID"]
    assert problems[0].files == (relative(file),)


def test_a_saved_head_that_is_not_in_the_log(folder, store):
    state = read_json(folder / "base_state.json")
    state["leaf_event_id"] = str(uuid.uuid4())
    write_json(folder / "base_state.json", state)
    result = import_conversation(store, folder)
    assert not result.imported
    assert [(p.code, p.files) for p in result.problems] == [("TREE-HEAD", ("base_state.json",))]


def test_a_truncated_base_state(folder, store):
    (folder / "base_state.json").write_text('{"id": "00000000-0000-4000-8000-0000')
    result = import_conversation(store, folder)
    assert not result.imported
    assert result.problems[0].code == "OPENHANDS-UNREADABLE"
    assert result.problems[0].files == ("base_state.json",)


def test_not_an_sdk_event(folder, store):
    file = event_files(folder)[2]
    data = read_json(file)
    del data["tool_call"]
    write_json(file, data)
    result = import_conversation(store, folder)
    assert not result.imported
    assert result.problems[0].code == "OPENHANDS-INVALID-EVENT"
    assert "tool_call" in result.problems[0].message


def test_an_sdk_event_treadle_cannot_model_is_kept_as_foreign(folder, store):
    file = event_files(folder)[1]
    data = read_json(file)
    data["llm_message"]["role"] = "system"
    write_json(file, data)
    result = import_conversation(store, folder)
    assert result.imported
    assert [n.code for n in result.notices] == ["OPENHANDS-NOT-MODELLED"]
    event = store.get_event(result.conversation_id, data["id"]).event
    assert event.kind == "foreign"
    assert event.payload["llm_message"]["role"] == "system"


def test_more_events_than_the_reader_accepts(folder, store):
    result = import_conversation(store, folder, max_events=4)
    assert not result.imported
    problem = result.problems[0]
    assert problem.code == "OPENHANDS-TOO-MANY-EVENTS"
    assert problem.files == (relative(event_files(folder)[4]),)


def test_stray_files_are_noted_not_fatal(folder, store):
    (folder / "events" / "notes.txt").write_text("hello")
    (folder / "events" / ".eventlog.lock").write_text("")
    result = import_conversation(store, folder)
    assert result.imported
    assert [(n.code, n.files) for n in result.notices] == [
        ("OPENHANDS-UNKNOWN-FILE", ("events/notes.txt",))
    ]


def test_import_of_a_folder_of_conversations_goes_on_past_a_broken_one(tmp_path):
    root = tmp_path / "conversations"
    good = copy_conversation("confirmation", root / "a_good")
    broken = copy_conversation("parallel_calls", root / "b_broken")
    other = copy_conversation("new_root", root / "c_good")
    (name,) = missing_parent(broken)
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    result = CliRunner().invoke(app, ["import", "openhands", str(root), "--store", url])
    assert result.exit_code == 1
    ids = result.stdout.split()
    assert ids == [read_json(f / "base_state.json")["id"] for f in (good, other)]
    assert "NOT imported" in result.stderr
    assert name in result.stderr
    with open_store(url) as opened:
        stored = {info.id for info in opened.list_conversations()}
    assert stored == set(ids)


def test_import_replace_and_existing(tmp_path):
    folder = copy_conversation("confirmation", tmp_path / "c")
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    first = runner.invoke(app, ["import", "openhands", str(folder), "--store", url])
    assert first.exit_code == 0, first.stderr
    (conversation_id,) = first.stdout.split()
    again = runner.invoke(app, ["import", "openhands", str(folder), "--store", url])
    assert again.exit_code == 1
    assert "--replace" in again.stderr
    # The folder moved on (a new message): --replace takes the new content whole.
    files = event_files(folder)
    new_id = str(uuid.uuid4())
    message = read_json(files[1]) | {"id": new_id, "parent_id": read_json(files[-1])["id"]}
    write_json(folder / "events" / f"event-{len(files):05d}-{new_id}.json", message)
    replaced = runner.invoke(
        app, ["import", "openhands", str(folder), "--store", url, "--replace", "--json"]
    )
    assert replaced.exit_code == 0, replaced.stderr
    (report,) = json.loads(replaced.stdout)
    assert report["replaced"]
    with open_store(url) as opened:
        info = opened.get_conversation(conversation_id)
        assert info.event_count == len(files) + 1
        assert info.head_id == read_json(folder / "base_state.json")["leaf_event_id"]


def test_export_cli(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    folder = copy_conversation("condensation", tmp_path / "c")
    (conversation_id,) = runner.invoke(
        app, ["import", "openhands", str(folder), "--store", url]
    ).stdout.split()
    out = tmp_path / "exported"
    result = runner.invoke(app, ["export", "openhands", conversation_id, str(out), "--store", url])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == str(out)
    for file in event_files(folder):
        assert (out / "events" / file.name).read_bytes() == file.read_bytes()
    again = runner.invoke(app, ["export", "openhands", conversation_id, str(out), "--store", url])
    assert again.exit_code == 2
    assert "not an empty folder" in again.stderr
    missing = runner.invoke(
        app, ["export", "openhands", "nope", str(tmp_path / "x"), "--store", url]
    )
    assert missing.exit_code == 2


def test_import_usage_errors(tmp_path):
    runner = CliRunner()
    assert runner.invoke(app, ["import", "openhands", str(tmp_path / "none")]).exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["import", "openhands", str(empty)])
    assert result.exit_code == 2
    assert "no OpenHands conversation" in result.stderr


def test_core_commands_refuse_a_folder_that_is_no_conversation(tmp_path):
    result = CliRunner().invoke(app, ["audit", str(tmp_path)])
    assert result.exit_code == 2
    assert "not an OpenHands conversation" in result.stderr


def test_a_message_with_tool_calls_is_not_taken_for_text(folder, store):
    file = event_files(folder)[-1]
    data = read_json(file)
    data["llm_message"]["tool_calls"] = [
        {"id": "x", "name": "terminal", "arguments": "{}", "origin": "completion"}
    ]
    write_json(file, data)
    conversation = read_conversation_folder(folder)
    assert conversation.events[-1].kind == "foreign"
    assert [n.code for n in conversation.notices] == ["OPENHANDS-NOT-MODELLED"]


def test_a_folder_without_base_state_is_named_by_its_folder(tmp_path, store):
    conversation_id = str(uuid.uuid4())
    folder = copy_conversation("parallel_calls", tmp_path / uuid.UUID(conversation_id).hex)
    (folder / "base_state.json").unlink()
    result = import_conversation(store, folder)
    assert result.imported
    assert result.conversation_id == conversation_id
    assert [n.code for n in result.notices] == ["OPENHANDS-BASE-STATE"]
    events = read_conversation_folder(folder).events
    assert store.head(conversation_id) == events[-1].id


# -- JSON no store could read back (issue 10, items 8 and 9) ---------------------------------

HOSTILE_VALUES = {
    "NaN": "NaN",
    "deep": "[" * 250 + "]" * 250,
    "surrogate": '"\\ud800"',
    "long int": "9" * 4400,
}


def _with_value(path, text):
    """``path``'s JSON object with one more field holding ``text`` (raw JSON)."""
    data = path.read_text(encoding="utf-8").rstrip()
    assert data.endswith("}")
    path.write_text(data[:-1] + ', "hostile": ' + text + "}", encoding="utf-8")


@pytest.mark.parametrize("where", ["base_state.json", "event"])
@pytest.mark.parametrize("value", sorted(HOSTILE_VALUES))
def test_hostile_json_is_named_and_not_imported_by_the_cli(folder, tmp_path, where, value):
    target = folder / "base_state.json" if where == "base_state.json" else event_files(folder)[2]
    _with_value(target, HOSTILE_VALUES[value])
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = CliRunner().invoke(app, ["import", "openhands", str(folder), "--store", url])
    assert result.exit_code == 1, result.output  # "1 if one was not imported" (README)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "NOT imported" in result.stderr
    assert "OPENHANDS-UNREADABLE" in result.stderr
    assert target.name in result.stderr
    assert "field 'hostile'" in result.stderr
    store = open_store(url)
    try:
        assert store.list_conversations() == []
    finally:
        store.close()


def test_a_base_state_that_is_a_fifo_is_a_problem_not_a_hang(folder, store):
    base = folder / "base_state.json"
    base.unlink()
    os.mkfifo(base)
    result = import_conversation(store, folder)
    assert not result.imported
    problem = next(p for p in result.problems if p.files == ("base_state.json",))
    assert "not a regular file" in problem.message
