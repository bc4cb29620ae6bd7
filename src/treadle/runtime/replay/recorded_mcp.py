"""The MCP tools of a recorded replay: stand-ins made from the tool schemas the system prompt
event recorded, so that no MCP server starts (a recorded replay runs nothing, sandboxed or not).

Each stand-in validates a call against its recorded input schema, as the live tool does; the
result comes from the recording (``RecordedTools``). A server that did not start in the
recorded run has no tool there: a call to it is answered with the error the run recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from treadle.data.mcp import mcp_tool_prefix
from treadle.events.frozen_json import thaw
from treadle.events.model import AgentErrorEvent, SystemPromptEvent
from treadle.runtime.replay.recording import Recording
from treadle.runtime.tools import ToolContext, ToolSet
from treadle.runtime.tools.base import Tool, ToolResult
from treadle.runtime.tools.mcp import MCPArguments, checked_arguments, schema_validator


class RecordedMCPTool(Tool[MCPArguments]):
    """An MCP tool as the recording offered it to the model: its name, description and input
    schema; never run (``RecordedTools.execute`` answers its calls)."""

    arguments_model = MCPArguments

    def __init__(self, schema: Mapping[str, Any]) -> None:
        function = schema["function"]
        self.name = function["name"]
        self.description = function.get("description", "")
        self._schema = dict(function.get("parameters") or {"type": "object", "properties": {}})
        self._validator = schema_validator(self._schema)

    def risky(self, arguments: MCPArguments) -> bool:
        # The read-only hint is not in the recorded schema: as the live tool without one.
        return True

    def parameters_schema(self) -> dict[str, Any]:
        return self._schema

    def parse_arguments(self, arguments: dict[str, Any]) -> MCPArguments:
        return checked_arguments(self._validator, arguments)

    def run(self, arguments: MCPArguments, context: ToolContext) -> ToolResult:
        raise RuntimeError(f"a recorded replay ran MCP tool {self.name!r}: it must run nothing")


def recorded_tool_set(built: ToolSet, recording: Recording) -> ToolSet:
    """``built`` (the conversation's own tools, no MCP server started) with a stand-in for each
    recorded tool it lacks, in the recorded order; ``unavailable`` as the recorded run had it."""
    schemas = _recorded_schemas(recording)
    tools: list[Tool[Any]] = []
    for schema in schemas:
        name = schema["function"]["name"]
        tools.append(built[name] if name in built else RecordedMCPTool(schema))
    named = {tool.name for tool in tools}
    tools += [tool for tool in built.values() if tool.name not in named]
    return ToolSet(tools, _unavailable(recording, {tool.name for tool in tools}))


def _recorded_schemas(recording: Recording) -> list[dict[str, Any]]:
    first = next((e for e in recording.path if isinstance(e, SystemPromptEvent)), None)
    return [] if first is None else [thaw(dict(schema)) for schema in first.tools]


def _unavailable(recording: Recording, offered: set[str]) -> dict[str, str]:
    """Prefix of each MCP server of the settings that had no tool in the recorded run -> the
    error its tools' calls got there (a server that did not start)."""
    prefixes = [mcp_tool_prefix(name) for name in recording.settings.mcp_servers]
    found: dict[str, str] = {}
    for result in recording.results.values():
        if not isinstance(result, AgentErrorEvent) or result.tool_name in offered:
            continue
        for prefix in prefixes:
            if result.tool_name.startswith(prefix):
                found.setdefault(prefix, result.error)
    return found
