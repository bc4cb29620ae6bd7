"""The tools map an agent holds, and the boundary every call crosses: validation into a typed
model, execution, ValueError -> ``ToolCallError``, and secrets masked before the result leaves."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from treadle.events.frozen_json import thaw
from treadle.runtime.secrets import Secrets
from treadle.runtime.tools.base import Tool, ToolArguments, ToolCallError, ToolContext, ToolResult
from treadle.runtime.tools.schema import parameters_summary

logger = logging.getLogger(__name__)

_MAX_ECHOED_INPUT = 80
"""How much of a bad value an error message quotes back to the model."""


class ToolSet(Mapping[str, Tool[Any]]):
    """An immutable ``name -> Tool`` map with the call boundary.

    Typical agent use, for one action::

        try:
            arguments = tools.validate(action.tool_name, action.arguments, action.raw_arguments)
            result = tools.execute(action.tool_name, arguments, context)
        except ToolCallError as error:
            record(error.to_agent_error(action, parent_id=...))
        else:
            record(result.to_observation(action, parent_id=...))
    """

    def __init__(
        self,
        tools: Iterable[Tool[Any]] = (),
        unavailable: Mapping[str, str] | None = None,
        mcp_servers: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.mcp_servers = tuple(dict(server) for server in mcp_servers)
        """What connecting the MCP servers gave (``mcp_servers`` fact entries, no secret)."""
        self._unavailable = dict(unavailable or {})
        """Name prefix -> why the tools whose names start with it are missing (an MCP server
        that did not start): a call to one is answered with that, not "unknown tool"."""
        self._tools: dict[str, Tool[Any]] = {}
        self._schemas_json: str | None = None
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}: tool names must be unique")
            self._tools[tool.name] = tool

    def __getitem__(self, name: str) -> Tool[Any]:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolSet({sorted(self._tools)!r})"

    @property
    def unavailable(self) -> dict[str, str]:
        """Name prefix -> why those tools are missing (see the constructor)."""
        return dict(self._unavailable)

    def openai_schemas(self) -> list[dict[str, Any]]:
        """Every tool as an OpenAI ``tools`` entry, in the order the tools were given; a fresh
        copy each time (a model client may change what it is given)."""
        if self._schemas_json is None:
            # Made once: every model call sends every tool's schema, and building them (or a
            # deep copy) costs more than the rest of a step's own work; a JSON parse is cheap.
            schemas = [tool.openai_schema() for tool in self._tools.values()]
            self._schemas_json = json.dumps(schemas, ensure_ascii=False)
        schemas_copy: list[dict[str, Any]] = json.loads(self._schemas_json)
        return schemas_copy

    def tool(self, tool_name: str) -> Tool[Any]:
        """The tool called ``tool_name``, or a ``ToolCallError`` listing the valid names."""
        tool = self._tools.get(tool_name)
        if tool is None:
            for prefix, why in self._unavailable.items():
                if tool_name.startswith(prefix):
                    raise ToolCallError(tool_name, "tool_error", why)
            available = ", ".join(self._tools) or "(none)"
            raise ToolCallError(
                tool_name,
                "unknown_tool",
                f"Unknown tool {tool_name!r}. Available tools: {available}. "
                "Call one of these by its exact name.",
            )
        return tool

    def validate(
        self,
        tool_name: str,
        arguments: Mapping[str, Any] | None,
        raw_arguments: str | None = None,
        *,
        secrets: Secrets | None = None,
    ) -> ToolArguments:
        """The call's arguments as the tool's model, or a ``ToolCallError`` for the model.

        ``arguments`` is the parsed JSON object (None when the model sent unparseable text;
        ``raw_arguments`` is then quoted back). Values quoted in the message are masked.
        """
        tool = self.tool(tool_name)
        mask = secrets.mask if secrets is not None else _identity
        if not isinstance(arguments, Mapping):
            summary = parameters_summary(tool.parameters_schema())
            shown = raw_arguments if arguments is None and raw_arguments is not None else arguments
            raise ToolCallError(
                tool_name,
                "invalid_arguments",
                mask(
                    f"The arguments of this {tool_name} call are not a JSON object "
                    f"(got {_shorten(shown, mask)}). Send one JSON object with the parameters: "
                    f"{summary}."
                ),
            )
        try:
            # Event arguments are frozen (tuples for lists); the model wants plain JSON.
            parsed: ToolArguments = tool.parse_arguments(thaw(dict(arguments)))
            return parsed
        except ValidationError as error:
            problems = "; ".join(_describe(detail, mask) for detail in error.errors())
        except ValueError as error:  # a tool's own check (e.g. an MCP tool's JSON Schema)
            problems = str(error)
        # Only a refused call needs the summary: building the schema costs ~1 ms per call.
        summary = parameters_summary(tool.parameters_schema())
        raise ToolCallError(
            tool_name,
            "invalid_arguments",
            mask(f"Invalid arguments for {tool_name}: {problems}. Parameters: {summary}."),
        )

    def execute(self, tool_name: str, arguments: ToolArguments, context: ToolContext) -> ToolResult:
        """Run a validated call. A ValueError from the tool becomes ``ToolCallError``; any other
        exception propagates unchanged (the agent records it). Secrets are masked in the result."""
        tool = self.tool(tool_name)
        try:
            result = tool.run(arguments, context)
        except ToolCallError as error:
            error.message = context.secrets.mask(error.message)
            error.args = (error.message,)
            raise
        except ValueError as error:
            message = str(error) or type(error).__name__
            raise ToolCallError(tool_name, "tool_error", context.secrets.mask(message)) from error
        return mask_result(result, context.secrets)

    def call(
        self,
        tool_name: str,
        arguments: Mapping[str, Any] | None,
        context: ToolContext,
        raw_arguments: str | None = None,
    ) -> ToolResult:
        """``validate`` then ``execute``: one call from parsed arguments to a masked result."""
        model = self.validate(tool_name, arguments, raw_arguments, secrets=context.secrets)
        return self.execute(tool_name, model, context)

    def is_risky(self, tool_name: str, arguments: ToolArguments) -> bool:
        """The tool's own risk hint for this call (unknown tools count as risky)."""
        tool = self._tools.get(tool_name)
        return True if tool is None else tool.risky(arguments)

    def may_change_files(self, tool_names: Iterable[str]) -> bool:
        """True unless every named tool exists and says it never changes the workspace."""
        return any(
            name not in self._tools or self._tools[name].changes_files for name in tool_names
        )

    def can_run_in_parallel(self, tool_names: Iterable[str]) -> bool:
        """True when every named tool exists and says concurrent calls are safe."""
        names = list(tool_names)
        return all(name in self._tools and self._tools[name].parallel_safe for name in names)

    def interrupt(self, context: ToolContext) -> None:
        """Tell every tool that ``context``'s run was interrupted (``Tool.interrupt``); one
        failing does not keep the others running."""
        for tool in self._tools.values():
            try:
                tool.interrupt(context)
            except Exception:
                logger.exception("interrupting tool %s failed", tool.name)

    def close(self) -> None:
        """Close every tool (terminal sessions, MCP connections); errors do not stop the rest."""
        failures: list[BaseException] = []
        for tool in self._tools.values():
            try:
                tool.close()
            except Exception as error:  # close the others first, then report
                failures.append(error)
        if failures:
            raise failures[0]


def mask_result(result: ToolResult, secrets: Secrets) -> ToolResult:
    """``result`` with every registered secret masked in its content and data."""
    if not len(secrets):
        return result
    return ToolResult(
        content=secrets.mask(result.content),
        is_error=result.is_error,
        data=secrets.mask_json(dict(result.data)),
        ends_turn=result.ends_turn,
        image_urls=result.image_urls,
    )


def _identity(text: str) -> str:
    return text


def _shorten(value: Any, mask: Callable[[str], str]) -> str:
    # Masked before shortening: a cut must not leave part of a secret readable.
    text = mask(repr(value))
    if len(text) > _MAX_ECHOED_INPUT:
        text = text[: _MAX_ECHOED_INPUT - 1] + "…"
    return text


def _describe(detail: ErrorDetails, mask: Callable[[str], str]) -> str:
    """One pydantic error in words a model can act on: where, what, and the value it got."""
    where = ".".join(str(part) for part in detail["loc"]) or "arguments"
    kind = detail["type"]
    if kind == "missing":
        return f"{where}: required parameter is missing"
    if kind == "extra_forbidden":
        return f"{where}: unknown parameter"
    message = detail["msg"].removeprefix("Value error, ")
    if kind == "value_error" and not detail["loc"]:
        return message
    return f"{where}: {message} (got {_shorten(detail.get('input'), mask)})"
