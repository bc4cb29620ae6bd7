"""The task file of an eval: JSON Lines, one frozen task a line, read whole and checked before
anything runs (``TaskFileError`` names the line); its digest is part of the eval's id."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from treadle.data.settings import ModelChoice
from treadle.errors import TreadleError
from treadle.events.json_limits import JsonLimitError, load_json
from treadle.files import FileRefused, read_regular_file

MAX_TASK_FILE_BYTES = 64 * 1024 * 1024
"""A task file larger than this is refused unread."""


class TaskFileError(TreadleError, ValueError):
    """The task file cannot be used: unreadable, not JSON Lines, or a task is malformed."""


class EvalTask(BaseModel):
    """One frozen task: what to ask, where its files come from, how to check the result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_:][A-Za-z0-9._:-]*$",
        description="Unique in the file: letters, digits and . _ - : (as conversation ids)",
    )
    instruction: str = Field(min_length=1)
    workspace: str | None = Field(
        default=None, description="A local folder copied as the starting files"
    )
    repo: str | None = Field(
        default=None, description="A git repository (path or URL) checked out at `commit`"
    )
    commit: str | None = Field(
        default=None,
        max_length=256,
        # A commit id, tag or branch: never an option (git would take "--orphan=x" as one).
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/^~@{}+-]*$",
        description="The commit, tag or branch of `repo` the task starts from",
    )
    setup: str | None = Field(
        default=None, description="A command run in the workspace before the agent starts"
    )
    verify: str = Field(min_length=1, description="A command run after: exit 0 = pass")
    model: ModelChoice | None = Field(
        default=None, description="This task's model instead of the eval's"
    )
    hidden_files: str | None = Field(
        default=None,
        description="A folder laid over the patched clean checkout before verify (never "
        "shown to the agent)",
    )
    test_patch: str | None = Field(
        default=None,
        max_length=16 * 1024 * 1024,
        description="A patch applied after the agent's, before verify (SWE-bench's test_patch)",
    )
    protected: tuple[str, ...] = Field(
        default=(),
        max_length=1000,
        description="Files or folders the agent's patch must not touch",
    )
    fail_to_pass: tuple[str, ...] | None = Field(
        default=None, max_length=100_000, description="Test ids that must pass (they failed)"
    )
    pass_to_pass: tuple[str, ...] | None = Field(
        default=None, max_length=100_000, description="Test ids that must still pass"
    )

    @field_validator("protected")
    @classmethod
    def _relative_paths(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = []
        for path in paths:
            parts = path.strip("/").split("/") if path else []
            if not parts or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError(
                    f"protected path {path[:80]!r} is not a plain relative path (no leading "
                    "'/', no '.', '..' or empty parts)"
                )
            if "\0" in path:
                raise ValueError("a protected path holds a NUL character")
            cleaned.append("/".join(parts))
        return tuple(cleaned)

    @field_validator("fail_to_pass", "pass_to_pass")
    @classmethod
    def _test_ids(cls, ids: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for test in ids or ():
            if not test.strip() or "\0" in test or "\n" in test:
                raise ValueError(f"test id {test[:80]!r} is empty or holds a NUL or a newline")
        return ids

    @field_validator("instruction", "workspace", "repo", "setup", "verify", "hidden_files")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        # A command line or a path cannot hold one (each attempt failed on it, "embedded
        # null byte", after a worker had been found for it).
        if value is not None and "\0" in value:
            raise ValueError("holds a NUL character")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> EvalTask:
        if (self.workspace is None) == (self.repo is None):
            raise ValueError("give exactly one source: workspace (a folder) or repo + commit")
        if self.repo is not None and not self.commit:
            raise ValueError("repo needs a commit to check out (frozen tasks start alike)")
        if self.commit is not None and self.repo is None:
            raise ValueError("commit applies to repo only")
        if self.repo is not None and self.repo.lstrip().startswith("-"):
            # git clone would read it as an option (--upload-pack=COMMAND runs COMMAND).
            raise ValueError(
                f"repo {self.repo[:60]!r} starts with '-': a path or URL, not an option"
            )
        return self


@dataclass(frozen=True)
class TaskFile:
    """The tasks of a file in its order, its path and the SHA-256 of its bytes."""

    path: Path
    tasks: tuple[EvalTask, ...]
    sha256: str


def read_task_file(path: Path) -> TaskFile:
    """The tasks of ``path``; relative ``workspace``/``repo`` paths are resolved against the
    file's folder. ``TaskFileError`` names the first bad line and what is wrong with it."""
    data, lines = read_json_lines(path)
    tasks = [validate_task(path, number, line) for number, line in lines]
    return task_file_of(path, tasks, [number for number, _ in lines], data)


def read_json_lines(path: Path) -> tuple[bytes, list[tuple[int, dict[str, Any]]]]:
    """A JSON Lines file's bytes and its objects with their line numbers (blank lines
    skipped); ``TaskFileError`` names the first line that is not a JSON object."""
    try:
        # A regular file only: /dev/zero would fill memory, a FIFO block for ever.
        data = read_regular_file(path, MAX_TASK_FILE_BYTES)
    except FileRefused as error:
        raise TaskFileError(f"task file {error}") from None
    except OSError as error:
        raise TaskFileError(f"cannot read task file {path}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TaskFileError(f"{path}: not UTF-8 text ({error.reason})") from None
    lines = [
        (number, _parse_line(path, number, line))
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]
    if not lines:
        raise TaskFileError(f"{path}: no tasks (one JSON object a line)")
    return data, lines


def task_file_of(
    path: Path, tasks: list[EvalTask], numbers: list[int], digested: bytes
) -> TaskFile:
    """The task file of ``tasks`` (read from ``path``, each from its line of ``numbers``):
    ids checked unique, local paths resolved; its digest is SHA-256 of ``digested``."""
    seen: dict[str, int] = {}
    resolved = []
    for number, task in zip(numbers, tasks, strict=True):
        if task.id in seen:
            raise TaskFileError(
                f"{path}:{number}: task id {task.id!r} is already used on line {seen[task.id]}"
            )
        seen[task.id] = number
        resolved.append(_resolved(task, path.parent, f"{path}:{number} (task {task.id!r})"))
    return TaskFile(path.resolve(), tuple(resolved), hashlib.sha256(digested).hexdigest())


def _parse_line(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        # Treadle's JSON only: a line nesting 100,000 deep would end the parser in a
        # RecursionError, and NaN or a 5,000-digit number cannot be stored with the results.
        data: Any = load_json(line)
    except json.JSONDecodeError as error:
        raise TaskFileError(
            f"{path}:{number}: not JSON ({error.msg} at column {error.colno})"
        ) from None
    except JsonLimitError as error:
        raise TaskFileError(f"{path}:{number}: {error}") from None
    if not isinstance(data, dict):
        raise TaskFileError(f"{path}:{number}: a task is a JSON object, not {type(data).__name__}")
    return data


def validate_task(path: Path, number: int, data: dict[str, Any]) -> EvalTask:
    """The task of line ``number``, or ``TaskFileError`` naming the line and the field."""
    try:
        return EvalTask.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        task = f" (task {data.get('id')!r})" if isinstance(data.get("id"), str) else ""
        raise TaskFileError(
            f"{path}:{number}{task}: {where + ': ' if where else ''}{first['msg']}"
        ) from None


def _resolved(task: EvalTask, base: Path, where: str) -> EvalTask:
    """Local sources and script files as absolute paths (a worker may run elsewhere). A
    relative source must stay inside the task file's folder once its links are followed
    (``where`` names the line when it does not)."""
    if task.model is not None and task.model.script is not None:
        script = str((base / task.model.script).resolve())
        task = task.model_copy(update={"model": task.model.model_copy(update={"script": script})})
    if task.hidden_files is not None:
        hidden = _local(task.hidden_files, base, where)
        task = task.model_copy(update={"hidden_files": hidden})
    if task.workspace is not None:
        return task.model_copy(update={"workspace": _local(task.workspace, base, where)})
    assert task.repo is not None
    if "://" not in task.repo and not task.repo.startswith("git@"):
        return task.model_copy(update={"repo": _local(task.repo, base, where)})
    return task


def _local(source: str, base: Path, where: str) -> str:
    """``source`` as an absolute path. A relative one that leads out of ``base`` (by ``..``
    or a symbolic link: a task folder shipped as a link to ``~`` would hand the agent your
    files unseen) is refused; an absolute path says where it goes and is taken as it is."""
    resolved = (base / source).resolve()
    if not Path(source).is_absolute() and not resolved.is_relative_to(base.resolve()):
        raise TaskFileError(
            f"{where}: {source!r} leads out of the task file's folder (to {resolved}): "
            "a relative source stays inside it; give an absolute path for a folder elsewhere"
        )
    return str(resolved)


def eval_id_for(
    task_file: TaskFile, model_settings: dict[str, Any], inputs_sha256: str = ""
) -> str:
    """The default eval id: a digest of the task file, the files its tasks name
    (``inputs_sha256``, environment.inputs_digest) and the eval's model settings, so that
    running the same eval again finds the results it already has, and changed starting files
    make a new eval."""
    digest = hashlib.sha256()
    digest.update(task_file.sha256.encode())
    digest.update(inputs_sha256.encode())
    digest.update(json.dumps(model_settings, sort_keys=True, separators=(",", ":")).encode())
    return f"eval-{digest.hexdigest()[:16]}"
