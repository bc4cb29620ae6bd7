"""The ``finish`` tool: the model says the task is done; the result ends the agent's turn.

Only this tool sets ``ends_turn``: an ordinary result never finishes a task (LINK-NOT-SUCCESS).
"""

from __future__ import annotations

from pydantic import Field

from treadle.runtime.tools.base import Tool, ToolArguments, ToolContext, ToolResult

_DESCRIPTION = """\
Finish: call this when the task is complete, or when you cannot go on without the user. \
`message` tells the user what was done (or what is needed from them). Your turn ends with it."""


class FinishArguments(ToolArguments):
    message: str = Field(description="What was done, or what you need from the user.")


class FinishTool(Tool[FinishArguments]):
    name = "finish"
    description = _DESCRIPTION
    arguments_model = FinishArguments
    parallel_safe = False  # it ends the turn: it should run after the calls beside it
    changes_files = False

    def run(self, arguments: FinishArguments, context: ToolContext) -> ToolResult:
        return ToolResult(content=arguments.message, data={"finished": True}, ends_turn=True)
