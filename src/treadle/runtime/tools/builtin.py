"""The built-in tools by name, so a conversation can store its tool names and any process can
rebuild the same tool set when it reopens the conversation."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from treadle.runtime.tools.base import Tool
from treadle.runtime.tools.file_editor import FileEditorTool
from treadle.runtime.tools.finish import FinishTool
from treadle.runtime.tools.task_tracker import TaskTrackerTool
from treadle.runtime.tools.terminal import TerminalTool
from treadle.runtime.tools.think import ThinkTool
from treadle.runtime.tools.toolset import ToolSet

BUILTIN_TOOLS: dict[str, type[Tool[Any]]] = {
    "terminal": TerminalTool,
    "file_editor": FileEditorTool,
    "task_tracker": TaskTrackerTool,
    "think": ThinkTool,
    "finish": FinishTool,
}
"""Name -> factory of a fresh instance (tools with state keep it per conversation)."""

FILE_SAFE_TOOLS: frozenset[str] = frozenset(
    name for name, tool in BUILTIN_TOOLS.items() if not tool.changes_files
)
"""The built-in tools that declare no call can change a file (``Tool.changes_files``): what the
log's readers know of a result from its tool name alone (which snapshot covers an event)."""


def builtin_tools(names: Iterable[str] | None = None) -> ToolSet:
    """A tool set of fresh built-in tools: all of them, or the ``names`` given, in that order."""
    chosen = list(BUILTIN_TOOLS) if names is None else list(names)
    unknown = [name for name in chosen if name not in BUILTIN_TOOLS]
    if unknown:
        raise ValueError(
            f"unknown built-in tool(s) {', '.join(unknown)}; "
            f"the built-in tools are {', '.join(BUILTIN_TOOLS)}"
        )
    return ToolSet(BUILTIN_TOOLS[name]() for name in chosen)
