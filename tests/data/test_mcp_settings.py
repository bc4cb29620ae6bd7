"""MCP servers in the settings: the tool-name rule (a property test) and the ``mcpServers``
entries the settings accept or refuse, with the message naming what."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from treadle.data.mcp import MCPServerConfig, mcp_tool_name, mcp_tool_prefix
from treadle.data.settings import ConversationSettings

FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
names = st.text(min_size=1, max_size=120)


@given(names, names)
def test_every_name_fits_what_providers_accept_and_is_the_same_every_time(
    server: str, tool: str
) -> None:
    name = mcp_tool_name(server, tool)
    assert FUNCTION_NAME.fullmatch(name)
    assert name == mcp_tool_name(server, tool)
    wanted = f"mcp__{server}__{tool}"
    if FUNCTION_NAME.fullmatch(wanted):
        assert name == wanted  # a name that fits is kept as it is
    else:
        assert name.startswith(mcp_tool_prefix(server)[: len(name) - 9])


@given(st.tuples(names, names), st.tuples(names, names))
def test_two_different_tools_never_get_the_same_name(first, second) -> None:
    if f"mcp__{first[0]}__{first[1]}" != f"mcp__{second[0]}__{second[1]}":
        assert mcp_tool_name(*first) != mcp_tool_name(*second)


def test_long_names_that_share_their_first_64_characters_stay_apart() -> None:
    long_tool = "read_" + "x" * 80
    first = mcp_tool_name("files", long_tool + "_a")
    second = mcp_tool_name("files", long_tool + "_b")
    assert len(first) == len(second) == 64
    assert first != second
    assert first[:55] == second[:55]


@given(names, st.lists(names, max_size=5))
def test_adding_a_server_never_renames_a_tool(server: str, others: list[str]) -> None:
    # The name is a function of the server's and the tool's names alone.
    before = mcp_tool_name(server, "search")
    for other in others:
        mcp_tool_name(other, "search")
    assert mcp_tool_name(server, "search") == before


def test_settings_store_the_servers_as_given_and_the_naming_rule() -> None:
    settings = ConversationSettings.litellm(
        "gpt-4o",
        "/tmp/ws",
        mcp_servers={
            "files": {"command": "npx", "args": ["-y", "srv"], "env": {"TOKEN": "${TOKEN}"}},
            "web": {"url": "https://mcp.example/mcp", "headers": {"Authorization": "${AUTH}"}},
        },
    )
    stored = settings.to_metadata()
    assert stored["mcp_servers"]["files"]["env"] == {"TOKEN": "${TOKEN}"}
    assert stored["mcp_tool_naming"] == "mcp__server__tool"
    again = ConversationSettings.from_metadata({"settings": stored})
    assert again == settings
    assert settings.mcp_servers["web"].references() == ["AUTH"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": "a", "url": "http://h"}, "give exactly one of command"),
        ({}, "give exactly one of command"),
        ({"url": "ftp://h"}, "is not an http:// or https:// URL"),
        ({"url": "http://h", "args": ["x"]}, "apply to a stdio server only"),
        ({"command": "a", "headers": {"A": "b"}}, "headers apply to an HTTP server"),
        ({"command": "a", "env": {"1BAD": "x"}}, "not a valid environment variable name"),
        ({"command": "a", "type": "http"}, "type http needs a url"),
        ({"command": "a", "disabled": True}, "Extra inputs are not permitted"),
    ],
)
def test_entries_that_cannot_work_are_refused_naming_why(entry: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        MCPServerConfig.model_validate(entry)


def test_a_server_name_with_a_control_character_is_refused() -> None:
    with pytest.raises(ValidationError, match="is not usable"):
        ConversationSettings.litellm("m", "/tmp/ws", mcp_servers={"a\nb": {"command": "x"}})
