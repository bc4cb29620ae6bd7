"""Fixtures for the tool tests: a workspace folder, a tool context with secrets, the tool set."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from treadle.runtime.secrets import Secrets
from treadle.runtime.tools import ToolContext, ToolSet, builtin_tools
from treadle.runtime.workspace import LocalWorkspace


@pytest.fixture
def workspace(tmp_path: Path) -> LocalWorkspace:
    return LocalWorkspace(tmp_path / "ws", create=True)


@pytest.fixture
def secrets() -> Secrets:
    return Secrets()


@pytest.fixture
def context(workspace: LocalWorkspace, secrets: Secrets) -> ToolContext:
    return ToolContext(workspace=workspace, secrets=secrets, conversation_id="conv-1")


@pytest.fixture
def tools() -> Iterator[ToolSet]:
    tool_set = builtin_tools()
    yield tool_set
    tool_set.close()
