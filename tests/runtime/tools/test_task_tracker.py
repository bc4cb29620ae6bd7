"""The task tracker: plan replaces the list, view shows it; per conversation; state dir on disk."""

import json
from pathlib import Path

import pytest

from treadle.runtime.tools import ToolCallError, ToolContext, ToolSet, builtin_tools
from treadle.runtime.workspace import LocalWorkspace

PLAN = [
    {"title": "Read the code", "status": "done"},
    {"title": "Fix the bug", "status": "in_progress", "notes": "off by one in tree.py"},
    {"title": "Run the tests"},
]


def test_plan_then_view(tools: ToolSet, context: ToolContext) -> None:
    planned = tools.call("task_tracker", {"command": "plan", "task_list": PLAN}, context)
    expected_rows = (
        "1. [done] Read the code\n"
        "2. [in_progress] Fix the bug — off by one in tree.py\n"
        "3. [todo] Run the tests"
    )
    assert planned.content == (
        "Task list updated (3 tasks: 1 done, 1 in progress, 1 to do):\n" + expected_rows
    )
    viewed = tools.call("task_tracker", {"command": "view"}, context)
    assert (
        viewed.content == "Task list (3 tasks: 1 done, 1 in progress, 1 to do):\n" + expected_rows
    )
    assert viewed.data["tasks"][2] == {"title": "Run the tests", "status": "todo", "notes": ""}


def test_lists_are_per_conversation(tools: ToolSet, context: ToolContext) -> None:
    tools.call("task_tracker", {"command": "plan", "task_list": PLAN}, context)
    other = ToolContext(workspace=context.workspace, conversation_id="conv-2")
    assert (
        tools.call("task_tracker", {"command": "view"}, other).content == "The task list is empty."
    )


def test_state_dir_keeps_the_list_across_tool_instances(tmp_path: Path) -> None:
    workspace = LocalWorkspace(tmp_path / "ws", create=True, state_dir=tmp_path / "state")
    context = ToolContext(workspace=workspace, conversation_id="conv/with slash")
    builtin_tools(["task_tracker"]).call(
        "task_tracker", {"command": "plan", "task_list": PLAN}, context
    )
    files = list((tmp_path / "state" / "tasks").iterdir())
    assert len(files) == 1
    assert json.loads(files[0].read_text())[1]["notes"] == "off by one in tree.py"
    reopened = builtin_tools(["task_tracker"]).call("task_tracker", {"command": "view"}, context)
    assert [task["title"] for task in reopened.data["tasks"]] == [
        "Read the code",
        "Fix the bug",
        "Run the tests",
    ]


def test_bad_plans_are_invalid_arguments(tools: ToolSet, context: ToolContext) -> None:
    with pytest.raises(ToolCallError, match="command plan needs task_list"):
        tools.call("task_tracker", {"command": "plan"}, context)
    with pytest.raises(ToolCallError) as caught:
        tools.call(
            "task_tracker",
            {"command": "plan", "task_list": [{"title": "x", "status": "blocked"}]},
            context,
        )
    assert "task_list.0.status: Input should be 'todo', 'in_progress' or 'done'" in (
        caught.value.message
    )
