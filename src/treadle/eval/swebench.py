"""SWE-bench's formats: its task instances (JSON Lines of ``instance_id``, ``repo`` as
``owner/name``, ``base_commit``, ``problem_statement``, ``test_patch``, ``FAIL_TO_PASS`` /
``PASS_TO_PASS`` as JSON strings) read as eval tasks, each repository taken from a folder of
local clones (``--repos DIR``: ``DIR/owner/name``); and an eval's patches written as its
predictions (``instance_id``, ``model_name_or_path``, ``model_patch``), which the SWE-bench
harness reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from treadle.eval.tasks import (
    TaskFile,
    TaskFileError,
    read_json_lines,
    task_file_of,
    validate_task,
)

REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement")


def read_swebench_file(path: Path, repos: Path | None, test_command: str) -> TaskFile:
    """SWE-bench instances as eval tasks: the agent gets the problem statement in a clone of
    the repository at ``base_commit``; the task's hidden ``test_patch`` is applied after its
    patch and ``test_command`` (a pytest-style runner) scores FAIL_TO_PASS and PASS_TO_PASS.
    The digest covers the file, the repositories' folder and the test command."""
    if repos is None:
        raise TaskFileError(
            "--format swebench needs --repos DIR: a folder holding a clone of each "
            "repository as DIR/OWNER/NAME (there is no network to clone from)"
        )
    if not repos.is_dir():
        raise TaskFileError(f"--repos {repos} is not a folder")
    if not test_command.strip() or "\0" in test_command:
        raise TaskFileError("--test-command is empty or holds a NUL")
    data, lines = read_json_lines(path)
    tasks = []
    for number, line in lines:
        tasks.append(validate_task(path, number, _as_task(path, number, line, repos, test_command)))
    digested = data + b"\0" + str(repos.resolve()).encode() + b"\0" + test_command.encode()
    return task_file_of(path, tasks, [number for number, _ in lines], digested)


def _as_task(
    path: Path, number: int, line: dict[str, Any], repos: Path, test_command: str
) -> dict[str, Any]:
    where = f"{path}:{number}"
    for key in REQUIRED:
        if not isinstance(line.get(key), str) or not line[key]:
            raise TaskFileError(f"{where}: {key} is required (a non-empty string)")
    owner_name = line["repo"]
    parts = owner_name.split("/")
    if len(parts) != 2 or any(part in ("", ".", "..") or part.startswith("-") for part in parts):
        raise TaskFileError(f"{where}: repo {owner_name[:80]!r} is not OWNER/NAME")
    clone = (repos / owner_name).resolve()
    if not clone.is_relative_to(repos.resolve()) or not clone.is_dir():
        raise TaskFileError(
            f"{where}: no clone of {owner_name} in --repos {repos} (expected {repos / owner_name})"
        )
    task: dict[str, Any] = {
        "id": line["instance_id"],
        "instruction": line["problem_statement"],
        "repo": str(clone),
        "commit": line["base_commit"],
        "verify": test_command,
    }
    if line.get("test_patch"):
        task["test_patch"] = line["test_patch"]
    if "model" in line:  # a Treadle extension (SWE-bench ignores it): this task's model
        task["model"] = line["model"]
    for key, field in (("FAIL_TO_PASS", "fail_to_pass"), ("PASS_TO_PASS", "pass_to_pass")):
        if key in line:
            task[field] = _test_list(where, key, line[key])
    return task


def _test_list(where: str, key: str, value: Any) -> list[str]:
    """A test list as SWE-bench stores it (a JSON string of a list) or as a list."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise TaskFileError(f"{where}: {key} is not a JSON list ({error.msg})") from None
    if not isinstance(value, list) or not all(isinstance(test, str) for test in value):
        raise TaskFileError(f"{where}: {key} is not a list of test ids")
    return value


def predictions(report: dict[str, Any], epoch: int = 1) -> list[dict[str, str]]:
    """An eval report's patches as SWE-bench predictions, one per task (its ``epoch``)."""
    model = report.get("model") or "treadle"
    return [
        {
            "instance_id": result["task_id"],
            "model_name_or_path": model,
            "model_patch": result.get("patch") or "",
        }
        for result in report["results"]
        if result.get("epoch", 1) == epoch and result["status"] != "not_run"
    ]
