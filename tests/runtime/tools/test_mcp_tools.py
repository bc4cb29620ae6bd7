"""MCP tools against a real MCP server process (the SDK's MCPServer), over stdio and HTTP."""

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from support.server_process import unassigned_port
from treadle.runtime.tools import ToolCallError, ToolContext, ToolSet
from treadle.runtime.tools.mcp import (
    MCPConnectionError,
    MCPServerSpec,
    connect_mcp_tools,
)

SERVER = Path(__file__).with_name("mcp_demo_server.py")


@pytest.fixture(scope="module")
def errlog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TextIO]:
    with (tmp_path_factory.mktemp("mcp") / "server.log").open("w") as log:
        yield log


@pytest.fixture(scope="module")
def stdio_tools(errlog: TextIO) -> Iterator[ToolSet]:
    spec = MCPServerSpec(
        name="demo",
        command=sys.executable,
        args=(str(SERVER),),
        env={"DEMO_SETTING": "from-spec"},
    )
    tools = ToolSet(connect_mcp_tools(spec, errlog=errlog))
    yield tools
    tools.close()


def test_tools_are_listed_with_their_schemas(stdio_tools: ToolSet) -> None:
    assert sorted(stdio_tools) == ["add", "env_value", "fail", "pixel_png", "shout", "wait"]
    schema = stdio_tools["add"].openai_schema()
    assert schema == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"title": "A", "type": "integer"},
                    "b": {"title": "B", "type": "integer"},
                },
                "required": ["a", "b"],
            },
        },
    }
    # Hints from the server's annotations: only read-only tools run in parallel without risk.
    assert stdio_tools["add"].parallel_safe is True
    assert stdio_tools["shout"].parallel_safe is False
    assert stdio_tools.is_risky("shout", stdio_tools.validate("shout", {"text": "x"})) is True
    assert stdio_tools.is_risky("add", stdio_tools.validate("add", {"a": 1, "b": 2})) is False


def test_an_interrupt_abandons_a_call_in_flight_and_the_connection_goes_on(
    stdio_tools: ToolSet, context: ToolContext
) -> None:
    results: list = []
    call = threading.Thread(
        target=lambda: results.append(stdio_tools.call("wait", {"seconds": 30}, context))
    )
    call.start()
    time.sleep(0.5)  # the call is in flight
    interrupted = time.monotonic()
    context.interruption.set()
    stdio_tools.interrupt(context)
    call.join(10)
    assert time.monotonic() - interrupted < 8  # not the call's 30 s; room for a loaded machine
    (result,) = results
    assert result.is_error
    assert result.data["interrupted"] is True
    assert stdio_tools.call("wait", {"seconds": 30}, context).data["interrupted"] is True
    context.interruption.clear()  # the next run: the same connection serves it
    assert stdio_tools.call("add", {"a": 2, "b": 40}, context).content == "42"


def test_calls_return_text_and_structured_content(
    stdio_tools: ToolSet, context: ToolContext
) -> None:
    result = stdio_tools.call("add", {"a": 2, "b": 40}, context)
    assert result.content == "42"
    assert result.is_error is False
    assert result.data == {"structured_content": {"result": 42}}
    assert stdio_tools.call("shout", {"text": "hi", "times": 2}, context).content == "HI HI"


def test_a_tool_error_is_an_error_result(stdio_tools: ToolSet, context: ToolContext) -> None:
    result = stdio_tools.call("fail", {"reason": "testing"}, context)
    assert result.is_error is True
    assert "failed on purpose: testing" in result.content


def test_arguments_are_checked_against_the_server_schema(
    stdio_tools: ToolSet, context: ToolContext
) -> None:
    with pytest.raises(ToolCallError) as caught:
        stdio_tools.call("add", {"a": "two"}, context)
    assert caught.value.reason == "invalid_arguments"
    assert caught.value.message == (
        "Invalid arguments for add: a: 'two' is not of type 'integer'; "
        "arguments: 'b' is a required property. Parameters: a*, b* (* = required)."
    )


def test_images_become_data_urls_and_odd_names_are_fitted(
    stdio_tools: ToolSet, context: ToolContext
) -> None:
    tool = stdio_tools["pixel_png"]
    assert tool.remote_name == "pixel.png"  # type: ignore[attr-defined]
    result = stdio_tools.call("pixel_png", {}, context)
    assert result.image_urls == ("data:image/png;base64,iVBORw0KGgo=",)


def test_spec_env_reaches_the_server_and_secrets_are_masked(
    stdio_tools: ToolSet, context: ToolContext
) -> None:
    context.secrets.add("DEMO_SETTING", "from-spec")
    result = stdio_tools.call("env_value", {"name": "DEMO_SETTING"}, context)
    assert result.content == "<secret:DEMO_SETTING>"
    assert result.data == {"structured_content": {"result": "<secret:DEMO_SETTING>"}}


def test_a_server_that_cannot_start_is_a_clear_error(errlog: TextIO) -> None:
    spec = MCPServerSpec(
        name="broken", command=sys.executable, args=("-c", "import sys; sys.exit(3)")
    )
    with pytest.raises(MCPConnectionError, match="cannot connect to MCP server 'broken'"):
        connect_mcp_tools(spec, errlog=errlog)


def test_spec_needs_exactly_one_transport() -> None:
    with pytest.raises(ValueError, match="needs exactly one of command \\(stdio\\) or url"):
        MCPServerSpec(name="none")


def test_streamable_http_server(context: ToolContext, errlog: TextIO) -> None:
    port = unassigned_port()
    server = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)], stdout=errlog, stderr=errlog
    )
    try:
        deadline = time.monotonic() + 60  # its start imports the MCP SDK: seconds when loaded
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        spec = MCPServerSpec(
            name="http-demo", url=f"http://127.0.0.1:{port}/mcp", tool_prefix="demo_"
        )
        tools = ToolSet(connect_mcp_tools(spec))
        try:
            assert "demo_add" in tools
            assert tools.call("demo_add", {"a": 5, "b": 6}, context).content == "11"
        finally:
            tools.close()
        # Headers (a token, say) go through an HTTP client of the connection's own.
        with_headers = spec.model_copy(update={"headers": {"Authorization": "Bearer t"}})
        tools = ToolSet(connect_mcp_tools(with_headers))
        try:
            assert tools.call("demo_add", {"a": 1, "b": 2}, context).content == "3"
        finally:
            tools.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
