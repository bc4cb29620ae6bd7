"""The ``think`` tool: the model writes down reasoning or a plan; nothing else happens.

The thought is recorded in the log as the call's arguments; the result only acknowledges it.
"""

from __future__ import annotations

from pydantic import Field

from treadle.runtime.tools.base import Tool, ToolArguments, ToolContext, ToolResult

_DESCRIPTION = """\
Think something through: reason about a problem, weigh options, or plan the next steps. \
This changes nothing in the workspace and fetches no information; use it when a complex \
decision deserves a moment of reflection."""


class ThinkArguments(ToolArguments):
    thought: str = Field(description="Your reasoning, as long as it needs to be.")


class ThinkTool(Tool[ThinkArguments]):
    name = "think"
    description = _DESCRIPTION
    arguments_model = ThinkArguments
    parallel_safe = True  # no effect at all
    changes_files = False

    def run(self, arguments: ThinkArguments, context: ToolContext) -> ToolResult:
        return ToolResult(content="Your thought has been recorded.")
