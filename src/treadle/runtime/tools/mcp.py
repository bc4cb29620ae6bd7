"""Tools of an MCP server (stdio command or streamable HTTP URL) through the official ``mcp`` SDK,
each exposed as a ``Tool``; one connection per server, kept open on a private event loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import re
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO, cast

import jsonschema
import mcp_types
from jsonschema.protocols import Validator
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from pydantic import BaseModel, ConfigDict, Field, model_validator

from treadle.errors import TreadleError
from treadle.runtime.tools.base import Tool, ToolArguments, ToolCallError, ToolContext, ToolResult
from treadle.runtime.tools.stderr_relay import StderrRelay
from treadle.runtime.workspace.shell import PidsCgroup

logger = logging.getLogger(__name__)

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What OpenAI-style APIs accept as a function name; other MCP names are rewritten to fit."""

_CLOSE_TIMEOUT = 10.0


class MCPConnectionError(TreadleError):
    """An MCP server could not be reached, or its connection broke: not something the model can
    fix, so it propagates (the agent records it)."""


class MCPCallCancelled(TreadleError):
    """A call cancelled because the run was interrupted: its answer, if any, is dropped."""


class MCPServerSpec(BaseModel):
    """How to reach one MCP server: a command (stdio) or a URL (streamable HTTP). Plain data, so
    a conversation's settings (``treadle.data.mcp.MCPServerConfig``) give one, with their ``${VAR}``
    references resolved (``mcp_config``), to the process that runs the conversation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="A label for messages and logs.")
    command: str | None = Field(default=None, description="stdio: the executable to start.")
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(
        default_factory=dict, description="stdio: variables added to the SDK's safe default set."
    )
    cwd: str | None = None
    url: str | None = Field(default=None, description="streamable HTTP: the server's endpoint.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="streamable HTTP: headers sent with every request."
    )
    tool_prefix: str = Field(
        default="", description="Put before every tool name, to avoid clashes."
    )
    call_timeout: float = Field(default=120.0, gt=0, description="Seconds one call may take.")
    label: str | None = Field(
        default=None, description="How messages show the target (default: command or URL)."
    )
    connect_timeout: float = Field(default=30.0, gt=0)
    pids_cgroup: str | None = Field(
        default=None,
        description="stdio: the pids cgroup the server's processes join (a sandboxed server's "
        "process limit); emptied and removed when the connection closes.",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r} needs exactly one of command (stdio) or url (HTTP)"
            )
        return self


class MCPConnection:
    """A live session with one MCP server. The SDK is async and its connection must be opened
    and closed by one task, so a private loop thread owns it; calls come in from any thread."""

    def __init__(self, spec: MCPServerSpec, *, errlog: TextIO | None = None) -> None:
        self.spec = spec
        self._errlog = errlog if errlog is not None else sys.stderr
        self._client: Client | None = None
        self._calls: set[concurrent.futures.Future[mcp_types.CallToolResult]] = set()
        """The calls in flight, which ``cancel_calls`` abandons."""
        self._calls_lock = threading.Lock()
        self._stopping: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._relays: list[StderrRelay] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"mcp-{spec.name}", daemon=True
        )
        self._thread.start()
        ready: concurrent.futures.Future[list[mcp_types.Tool]] = concurrent.futures.Future()
        self._session = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        try:
            self.tools: list[mcp_types.Tool] = ready.result(timeout=spec.connect_timeout)
        except BaseException as error:
            self.close()
            if isinstance(error, concurrent.futures.TimeoutError):
                reason = f"no answer within {spec.connect_timeout:g} s"
            else:
                reason = f"{type(error).__name__}: {error}"
            raise MCPConnectionError(
                f"cannot connect to MCP server {spec.name!r} ({self._target_text()}): {reason}; "
                "check the command or URL and that the server starts on its own"
            ) from error

    def _target_text(self) -> str:
        if self.spec.label is not None:
            return self.spec.label
        if self.spec.url is not None:
            return self.spec.url
        return " ".join([self.spec.command or "", *self.spec.args])

    def _transport(self, http_client: Any) -> Any:
        if self.spec.url is not None:
            if http_client is None:
                return self.spec.url
            return streamable_http_client(self.spec.url, http_client=http_client)
        parameters = StdioServerParameters(
            command=self.spec.command or "",
            args=list(self.spec.args),
            env=dict(self.spec.env) or None,
            cwd=self.spec.cwd,
        )
        # The server's stderr is a pipe of its own, never this process's (see stderr_relay).
        relay = StderrRelay(f"mcp {self.spec.name}", self._errlog)
        self._relays.append(relay)
        return stdio_client(parameters, errlog=cast(TextIO, relay.writer))

    async def _serve(self, ready: concurrent.futures.Future[list[mcp_types.Tool]]) -> None:
        self._stopping = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                http_client = None
                if self.spec.headers:  # headers need an HTTP client of our own, closed here
                    http_client = await stack.enter_async_context(
                        create_mcp_http_client(headers=self.spec.headers)
                    )
                client = await stack.enter_async_context(Client(self._transport(http_client)))
                self._close_relay_writers()  # the server holds its own copy now
                tools = await _list_all_tools(client)
                self._client = client
                ready.set_result(tools)
                await self._stopping.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error)
            else:
                self._failure = error
                logger.warning("MCP server %r disconnected: %s", self.spec.name, error)
        finally:
            self._client = None
            self._close_relay_writers()

    def _close_relay_writers(self) -> None:
        for relay in self._relays:
            relay.close_writer()

    @property
    def alive(self) -> bool:
        return self._client is not None

    def call_tool(
        self, name: str, arguments: dict[str, Any], stop: threading.Event | None = None
    ) -> mcp_types.CallToolResult:
        """One ``tools/call``. Raises ``MCPError`` for a protocol-level refusal or timeout,
        ``MCPConnectionError`` when the server is gone, and ``MCPCallCancelled`` when ``stop``
        is set (before it, or then ``cancel_calls`` is called while it runs)."""
        client = self._client
        if client is None:
            raise MCPConnectionError(
                f"MCP server {self.spec.name!r} is not connected"
                + (f" (it failed: {self._failure})" if self._failure else "")
                + "; its tools are unavailable until the conversation is opened again"
            )
        timeout = self.spec.call_timeout
        future = asyncio.run_coroutine_threadsafe(
            client.call_tool(name, arguments, read_timeout_seconds=timeout), self._loop
        )
        with self._calls_lock:
            self._calls.add(future)
        if stop is not None and stop.is_set():  # interrupted before ``cancel_calls`` saw it
            future.cancel()
        try:
            # The SDK enforces the timeout itself; this bound only guards against a stuck loop.
            return future.result(timeout=timeout + _CLOSE_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise MCPError(
                code=mcp_types.REQUEST_TIMEOUT, message=f"no answer within {timeout:g} s"
            ) from None
        except concurrent.futures.CancelledError:
            raise MCPCallCancelled(f"the call to {name} was cancelled") from None
        finally:
            with self._calls_lock:
                self._calls.discard(future)

    def cancel_calls(self) -> None:
        """Abandon the calls in flight (their tasks are cancelled; the server may still finish
        them, and their answers are dropped). Any thread may call it."""
        with self._calls_lock:
            calls = list(self._calls)
        for future in calls:
            future.cancel()

    def close(self) -> None:
        """End the session (stops a stdio server process) and the loop thread. Idempotent."""
        if self._loop.is_closed():
            self._free_cgroup()
            return
        if self._client is None:
            self._session.cancel()  # still connecting (a timeout): stop trying
        elif self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        try:
            self._session.result(timeout=_CLOSE_TIMEOUT)
        except concurrent.futures.CancelledError:
            pass
        except concurrent.futures.TimeoutError:
            logger.warning(
                "MCP server %r did not close within %g s", self.spec.name, _CLOSE_TIMEOUT
            )
        except Exception:  # already reported by _serve, through ready or _failure
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_CLOSE_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()
        self._free_cgroup()
        for relay in self._relays:  # the server is gone: its stderr ends
            relay.close_writer()
            relay.join(_CLOSE_TIMEOUT)

    def _free_cgroup(self) -> None:
        """Kill whatever of the server is left in its cgroup and remove it (safe twice)."""
        if self.spec.pids_cgroup is not None:
            PidsCgroup(Path(self.spec.pids_cgroup)).kill()


async def _list_all_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


class MCPArguments(ToolArguments):
    """Whatever the server's JSON Schema allows; checked against that schema, not a model."""

    model_config = ConfigDict(extra="allow", frozen=True)


class MCPTool(Tool[MCPArguments]):
    """One tool of an MCP server. Its schema, description and hints come from the server."""

    arguments_model = MCPArguments

    def __init__(
        self, connection: MCPConnection, remote: mcp_types.Tool, name: str | None = None
    ) -> None:
        self.connection = connection
        self.remote_name = remote.name
        wanted = connection.spec.tool_prefix + remote.name
        if name is not None:
            self.name = name
        else:
            self.name = wanted if _TOOL_NAME.fullmatch(wanted) else _fit_name(wanted)
        self.description = remote.description or (
            f"Tool {remote.name} of the MCP server {connection.spec.name}."
        )
        hints = remote.annotations
        self._read_only = bool(hints and hints.read_only_hint)
        # Only a tool the server declares read-only is assumed safe to run beside others.
        self.parallel_safe = self._read_only
        self._schema = _object_schema(remote.input_schema)
        self._validator = schema_validator(self._schema)

    def risky(self, arguments: MCPArguments) -> bool:
        return not self._read_only

    def parameters_schema(self) -> dict[str, Any]:
        return self._schema

    def parse_arguments(self, arguments: dict[str, Any]) -> MCPArguments:
        return checked_arguments(self._validator, arguments)

    def run(self, arguments: MCPArguments, context: ToolContext) -> ToolResult:
        try:
            result = self.connection.call_tool(
                self.remote_name, dict(arguments.model_extra or {}), context.interruption
            )
        except MCPConnectionError as error:
            # The server is gone: this call fails, named; the other tools and the run go on.
            raise ToolCallError(self.name, "tool_error", f"{error}") from error
        except MCPCallCancelled:
            return ToolResult(
                content="[the call was cancelled: the run was interrupted; the MCP server may "
                "still complete it]",
                is_error=True,
                data={"interrupted": True},
            )
        except MCPError as error:
            if error.code == mcp_types.REQUEST_TIMEOUT:
                return ToolResult(
                    content=f"[the MCP server {self.connection.spec.name} did not answer: "
                    f"{error.message}]",
                    is_error=True,
                    data={"timed_out": True},
                )
            if error.code == mcp_types.CONNECTION_CLOSED:
                raise ToolCallError(
                    self.name,
                    "tool_error",
                    f"the MCP server {self.connection.spec.name!r} closed the connection (it "
                    f"stopped or crashed): {self.remote_name} did not answer; its "
                    "tools are unavailable until the conversation is opened again",
                ) from error
            # The server refused this call (bad parameters, unknown tool): the model can adapt.
            raise ValueError(
                f"the MCP server refused the call (error {error.code}): {error.message}"
            ) from error
        return _to_result(result)

    def interrupt(self, context: ToolContext) -> None:
        # A connection belongs to one conversation's tool set: all its calls are that run's.
        self.connection.cancel_calls()

    def close(self) -> None:
        self.connection.close()


def schema_validator(schema: Mapping[str, Any]) -> Validator:
    """The validator of a tool's input schema (the draft it names, else the latest)."""
    return jsonschema.validators.validator_for(schema)(schema)


def checked_arguments(validator: Validator, arguments: dict[str, Any]) -> MCPArguments:
    """``arguments`` checked against an MCP tool's schema: ``ValueError`` listing each problem
    (the model can fix them), as the tool set words a refused call."""
    problems = [
        f"{'.'.join(str(part) for part in error.absolute_path) or 'arguments'}: "
        + _shorten(error.message)
        for error in validator.iter_errors(arguments)
    ]
    if problems:
        raise ValueError("; ".join(problems))
    return MCPArguments.model_validate(arguments)


def connect_mcp_tools(
    spec: MCPServerSpec,
    *,
    errlog: TextIO | None = None,
    name_tool: Callable[[str], str] | None = None,
) -> list[MCPTool]:
    """Connect to the server and wrap each of its tools (``name_tool``: the name the model
    calls a remote tool by; default: ``tool_prefix`` + its name, fitted); ``ToolSet.close``
    disconnects."""
    connection = MCPConnection(spec, errlog=errlog)
    try:
        return [
            MCPTool(connection, remote, name_tool(remote.name) if name_tool else None)
            for remote in connection.tools
        ]
    except BaseException:
        connection.close()
        raise


def _shorten(message: str, limit: int = 200) -> str:
    # jsonschema quotes the offending value whole; a long string would flood the message.
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _fit_name(name: str) -> str:
    fitted = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]
    return fitted or "mcp_tool"


def _object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The server's input schema as a function's ``parameters``: an object with properties,
    without the annotations (``$schema``, titles) providers reject or ignore."""
    cleaned = {key: value for key, value in schema.items() if key not in ("$schema", "title")}
    cleaned.setdefault("type", "object")
    cleaned.setdefault("properties", {})
    return cleaned


def _to_result(result: mcp_types.CallToolResult) -> ToolResult:
    """Text blocks become the content; images become data URLs; structured output goes to data
    (and to the content when the server sent no text)."""
    texts: list[str] = []
    images: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            images.append(f"data:{block.mime_type};base64,{block.data}")
        elif isinstance(block, mcp_types.AudioContent):
            texts.append(f"[audio: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, mcp_types.ResourceLink):
            texts.append(f"[resource: {block.uri}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            text = getattr(resource, "text", None)
            texts.append(text if text is not None else f"[binary resource: {resource.uri}]")
    data: dict[str, Any] = {}
    if result.structured_content is not None:
        data["structured_content"] = result.structured_content
        if not texts:
            texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return ToolResult(
        content="\n".join(texts), is_error=result.is_error, data=data, image_urls=tuple(images)
    )
