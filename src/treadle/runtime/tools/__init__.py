"""Tools the model can call, and the boundary a call crosses (validate, execute, mask secrets).

``builtin_tools()`` gives terminal, file_editor, task_tracker, think and finish as a ``ToolSet``.
"""

from treadle.runtime.tools.base import (
    Tool,
    ToolArguments,
    ToolCallError,
    ToolContext,
    ToolResult,
)
from treadle.runtime.tools.builtin import BUILTIN_TOOLS, builtin_tools
from treadle.runtime.tools.file_editor import FileEditorTool
from treadle.runtime.tools.finish import FinishTool
from treadle.runtime.tools.task_tracker import TaskTrackerTool
from treadle.runtime.tools.terminal import TerminalTool
from treadle.runtime.tools.think import ThinkTool
from treadle.runtime.tools.toolset import ToolSet

__all__ = [
    "BUILTIN_TOOLS",
    "FileEditorTool",
    "FinishTool",
    "TaskTrackerTool",
    "TerminalTool",
    "ThinkTool",
    "Tool",
    "ToolArguments",
    "ToolCallError",
    "ToolContext",
    "ToolResult",
    "ToolSet",
    "builtin_tools",
]
