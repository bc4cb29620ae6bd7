"""The ``task_tracker`` tool: the model's own task list (todo / in_progress / done) for one
conversation, kept in the workspace's state dir when it has one, else in memory."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from treadle.runtime.tools.base import Tool, ToolArguments, ToolContext, ToolResult

TaskStatus = Literal["todo", "in_progress", "done"]

_DESCRIPTION = """\
Keep a task list for this conversation, to plan multi-step work and track progress.
* `view` shows the current list.
* `plan` replaces the whole list with `task_list` (send every task, also the unchanged ones); \
each task has a `title`, a `status` (todo, in_progress, done) and optional `notes`.
Mark a task in_progress when you start it and done as soon as it is finished."""


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=1, description="What to do, in a few words.")
    status: TaskStatus = Field(default="todo", description="todo, in_progress or done.")
    notes: str = Field(default="", description="Details, findings, what remains.")


_TASKS = TypeAdapter(list[Task])


class TaskTrackerArguments(ToolArguments):
    command: Literal["view", "plan"] = Field(description="view the list, or plan (replace) it.")
    task_list: list[Task] | None = Field(
        default=None, description="plan: the complete new list, in order."
    )

    @model_validator(mode="after")
    def _plan_has_a_list(self) -> TaskTrackerArguments:
        if self.command == "plan" and self.task_list is None:
            raise ValueError("command plan needs task_list (the complete list; [] clears it)")
        return self


class TaskTrackerTool(Tool[TaskTrackerArguments]):
    name = "task_tracker"
    description = _DESCRIPTION
    arguments_model = TaskTrackerArguments
    parallel_safe = False  # plan replaces the list: two in one batch would race on the order
    changes_files = False  # its list lives in the workspace's state folder, or in memory

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_memory: dict[str, list[Task]] = {}

    def run(self, arguments: TaskTrackerArguments, context: ToolContext) -> ToolResult:
        state_file = _state_file(context)
        with self._lock:
            if arguments.command == "plan":
                tasks = list(arguments.task_list or [])
                self._save(context.conversation_id, state_file, tasks)
            else:
                tasks = self._load(context.conversation_id, state_file)
        return ToolResult(
            content=_render(tasks, planned=arguments.command == "plan"),
            data={"tasks": [task.model_dump() for task in tasks]},
        )

    def _load(self, conversation_id: str, state_file: Path | None) -> list[Task]:
        if state_file is None:
            return list(self._in_memory.get(conversation_id, []))
        if not state_file.exists():
            return []
        return _TASKS.validate_json(state_file.read_bytes())

    def _save(self, conversation_id: str, state_file: Path | None, tasks: list[Task]) -> None:
        if state_file is None:
            self._in_memory[conversation_id] = tasks
            return
        state_file.parent.mkdir(parents=True, exist_ok=True)
        partial = state_file.with_suffix(".json.partial")
        partial.write_bytes(_TASKS.dump_json(tasks, indent=2))
        os.replace(partial, state_file)  # a crash leaves the old list or the new, never half


def _state_file(context: ToolContext) -> Path | None:
    state_dir = context.workspace.state_dir
    if state_dir is None:
        return None
    name = context.conversation_id
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", name) or name.startswith("."):
        name = hashlib.sha256(name.encode()).hexdigest()
    return state_dir / "tasks" / f"{name}.json"


def _render(tasks: list[Task], *, planned: bool) -> str:
    if not tasks:
        return "The task list is now empty." if planned else "The task list is empty."
    counts = dict.fromkeys(("done", "in_progress", "todo"), 0)
    for task in tasks:
        counts[task.status] += 1
    summary = (
        f"{len(tasks)} tasks: {counts['done']} done, {counts['in_progress']} in progress, "
        f"{counts['todo']} to do"
    )
    rows = [
        f"{number}. [{task.status}] {task.title}" + (f" — {task.notes}" if task.notes else "")
        for number, task in enumerate(tasks, start=1)
    ]
    heading = "Task list updated" if planned else "Task list"
    return f"{heading} ({summary}):\n" + "\n".join(rows)
