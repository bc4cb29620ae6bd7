"""The committed OpenHands SDK fixtures (tests/fixtures/openhands), copies to break, and the
normalisation under which Treadle's projection must equal the messages the SDK sends.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openhands"
CONVERSATIONS: dict[str, Path] = {
    "parallel_calls": FIXTURES / "parallel_calls",
    "agent_errors": FIXTURES / "agent_errors",
    "file_edits": FIXTURES / "file_edits",
    "fork_source": FIXTURES / "fork_and_navigate" / "source",
    "fork": FIXTURES / "fork_and_navigate" / "fork",
    "new_root": FIXTURES / "new_root",
    "empty_head": FIXTURES / "empty_head",
    "confirmation": FIXTURES / "confirmation",
    "condensation": FIXTURES / "condensation",
    "killed_mid_tool": FIXTURES / "killed_mid_tool",
    "killed_then_resumed": FIXTURES / "killed_then_resumed",
}
TEST_DATA = frozenset({"expected_messages.json", "model_calls.json"})
"""Files the fixture script adds next to the SDK's own."""


def sdk_files(folder: Path) -> list[Path]:
    """The files the SDK wrote, relative to ``folder``."""
    return sorted(
        path.relative_to(folder)
        for path in folder.rglob("*")
        if path.is_file() and path.name not in TEST_DATA
    )


def copy_conversation(name: str, target: Path) -> Path:
    """A copy of fixture ``name``'s SDK files at ``target`` (to break it)."""
    source = CONVERSATIONS[name]
    for relative in sdk_files(source):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / relative, target / relative)
    return target


def event_files(folder: Path) -> list[Path]:
    return sorted((folder / "events").glob("event-*.json"))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, separators=(",", ":")), encoding="utf-8")


def normalised(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with only representational differences removed, each rule a real one:

    1. ``content`` as a list of parts (the SDK's list serializer, used for models with native
       tool calling) becomes the string of its text parts joined by newlines: what the SDK's
       own string serializer sends for the same message. Treadle sends a string, or parts
       when it merged user messages. Parts' ``cache_prompt``/``cache_control`` flags go with
       the list (none is set for the fixtures' model).
    2. An assistant tool-call turn without text: the SDK leaves ``content`` out, Treadle sends
       ``null``; both become ``null``.

    Everything else is compared as is: roles, order, tool_calls (ids, types, names, argument
    strings), tool_call_id and name of results, reasoning_content.
    """
    out = []
    for message in messages:
        message = dict(message)
        content = message.get("content")
        if isinstance(content, list):
            message["content"] = "\n".join(
                part["text"] for part in content if part.get("type") == "text"
            )
        if message["role"] == "assistant" and message.get("tool_calls"):
            message["content"] = message.get("content") or None
        out.append(message)
    return out
