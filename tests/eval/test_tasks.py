"""The task file: JSON Lines read whole, each bad line named with what is wrong; the default
eval id follows the file's bytes and the model settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from treadle.data.settings import ModelChoice
from treadle.eval.driver import model_settings
from treadle.eval.tasks import TaskFileError, eval_id_for, read_task_file

GOOD = {"id": "t1", "instruction": "do it", "workspace": "start", "verify": "true"}


def write(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    )
    return path


def test_tasks_are_read_in_order_with_local_paths_made_absolute(tmp_path):
    path = write(
        tmp_path,
        GOOD,
        "",
        {**GOOD, "id": "t2", "workspace": None, "repo": "r", "commit": "abc", "setup": "make"},
        {**GOOD, "id": "t3", "model": {"kind": "scripted", "script": "s.json"}},
    )
    read = read_task_file(path)
    assert [task.id for task in read.tasks] == ["t1", "t2", "t3"]
    assert read.tasks[0].workspace == str(tmp_path / "start")
    assert read.tasks[1].repo == str(tmp_path / "r")
    assert read.tasks[1].setup == "make"
    assert read.tasks[2].model == ModelChoice(kind="scripted", script=str(tmp_path / "s.json"))
    remote = write(tmp_path, {**GOOD, "workspace": None, "repo": "https://x/y.git", "commit": "a"})
    assert read_task_file(remote).tasks[0].repo == "https://x/y.git"


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        ([GOOD, "{not json"], "tasks.jsonl:2: not JSON"),
        ([GOOD, [1, 2]], "tasks.jsonl:2: a task is a JSON object, not list"),
        ([{**GOOD, "verify": None}], "tasks.jsonl:1 (task 't1'): verify:"),
        ([{**GOOD, "workspace": None}], "give exactly one source"),
        ([{**GOOD, "repo": "r", "commit": "c"}], "give exactly one source"),
        ([{**GOOD, "workspace": None, "repo": "r"}], "repo needs a commit"),
        ([{**GOOD, "surprise": 1}], "tasks.jsonl:1 (task 't1'): surprise: Extra inputs"),
        ([{**GOOD, "id": "a/b"}], "tasks.jsonl:1 (task 'a/b'): id:"),
        ([GOOD, GOOD], "tasks.jsonl:2: task id 't1' is already used on line 1"),
        ([{**GOOD, "model": {"kind": "scripted"}}], "model: Value error, a scripted model"),
        ([""], "no tasks"),
        ([{**GOOD, "verify": "true\0; rm -rf ~"}], "(task 't1'): verify: Value error, holds a NUL"),
        ([{**GOOD, "setup": "make\0"}], "(task 't1'): setup: Value error, holds a NUL"),
        ([{**GOOD, "instruction": "go\0"}], "(task 't1'): instruction: Value error, holds a NUL"),
        ([{**GOOD, "workspace": "st\0art"}], "(task 't1'): workspace: Value error, holds a NUL"),
    ],
)
def test_a_bad_task_file_is_refused_naming_the_line(tmp_path, lines, said):
    with pytest.raises(TaskFileError) as refused:
        read_task_file(write(tmp_path, *lines))
    assert said in str(refused.value)


def test_unreadable_and_binary_files_are_refused(tmp_path):
    with pytest.raises(TaskFileError, match="cannot read task file"):
        read_task_file(tmp_path / "missing.jsonl")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(TaskFileError, match="not UTF-8"):
        read_task_file(binary)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('{"id": "t", "instruction": ' + "[" * 100_000 + "]" * 100_000 + "}", "MAX_JSON_DEPTH"),
        ('{"id": "t", "instruction": "i", "workspace": "s", "verify": NaN}', "NaN"),
        ('{"id": "t", "instruction": ' + "9" * 5000 + "}", "MAX_INT_DIGITS"),
    ],
)
def test_json_treadle_cannot_take_is_refused_naming_the_line(tmp_path, line, said):
    # The deep line ended the parser in a RecursionError (a traceback, not exit 2).
    with pytest.raises(TaskFileError) as refused:
        read_task_file(write(tmp_path, GOOD, line))
    assert "tasks.jsonl:2: " in str(refused.value)
    assert said in str(refused.value)


def test_only_a_regular_file_is_read(tmp_path):
    # /dev/zero (its size reads as 0) was read until memory ran out; a FIFO blocked for ever.
    with pytest.raises(TaskFileError, match="/dev/zero is not a regular file"):
        read_task_file(Path("/dev/zero"))
    fifo = tmp_path / "tasks.fifo"
    os.mkfifo(fifo)
    with pytest.raises(TaskFileError, match="is not a regular file"):
        read_task_file(fifo)


@pytest.mark.parametrize("field", ["workspace", "repo"])
def test_a_relative_source_that_leads_out_of_the_folder_is_refused(tmp_path, field):
    # A task folder shipped as a link to / (or ~) was copied whole into the agent's workspace.
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "start").symlink_to("/")
    source = {"workspace": None, "repo": None, "commit": "abc" if field == "repo" else None}
    for relative in ("start", "../elsewhere", "start/etc"):
        line = {**GOOD, **source, field: relative}
        with pytest.raises(TaskFileError) as refused:
            read_task_file(write(folder, {k: v for k, v in line.items() if v is not None}))
        said = str(refused.value)
        assert (
            f"tasks.jsonl:1 (task 't1'): {relative!r} leads out of the task file's folder" in said
        )
        assert "give an absolute path" in said
    # Said outright, a folder elsewhere is taken; so is a link that stays inside.
    (folder / "inner").mkdir()
    (folder / "linked").symlink_to("inner")
    for given, found in (("/", "/"), ("linked", str(folder / "inner"))):
        line = {k: v for k, v in {**GOOD, **source, field: given}.items() if v is not None}
        assert getattr(read_task_file(write(folder, line)).tasks[0], field) == found


def test_the_default_eval_id_follows_the_file_and_the_model(tmp_path):
    path = write(tmp_path, GOOD)
    first = read_task_file(path)
    litellm = model_settings(ModelChoice(kind="litellm", model="gpt-x"))
    assert eval_id_for(first, litellm) == eval_id_for(read_task_file(path), litellm)
    other_model = model_settings(ModelChoice(kind="litellm", model="gpt-y"))
    assert eval_id_for(first, other_model) != eval_id_for(first, litellm)
    changed = read_task_file(write(tmp_path, {**GOOD, "instruction": "do it again"}))
    assert eval_id_for(changed, litellm) != eval_id_for(first, litellm)
    assert eval_id_for(first, litellm).startswith("eval-")
