"""The text the OpenHands SDK sends its model for an event's content parts, without the SDK.

Text parts are joined with newlines (as the SDK's string serializer does); a tool result is
rendered as its observation class renders it (``to_llm_content``, SDK 1.58.2).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

ERROR_MESSAGE_HEADER = "[An error occurred during execution.]\n"
"""``Observation.ERROR_MESSAGE_HEADER``: the SDK puts it before the content of an error."""

TERMINAL_OUTPUT_LIMIT = 30_000
"""``openhands.tools.terminal.constants.MAX_CMD_OUTPUT_SIZE``."""
_TRUNCATE_NOTICE = (
    "<response clipped><NOTE>Due to the max output limit, only part of the full "
    "response has been shown to you.</NOTE>"
)
_TRUNCATE_NOTICE_WITH_PERSIST = (
    "<response clipped><NOTE>Due to the max output limit, only part of the full "
    "response has been shown to you. The complete output has been saved to "
    "{file_path} - you can use other tools to view the full content (truncated "
    "part starts around line {line_num}).</NOTE>"
)

OBSERVATIONS_RENDERED_OTHERWISE = frozenset(
    {
        "BrowserObservation",
        "TaskObservation",
        "ConsultTomObservation",
        "SleeptimeComputeObservation",
    }
)
"""Observation kinds whose ``to_llm_content`` (in openhands-tools) adds text Treadle does not
mirror; they are rendered by the base rule and reported."""

Part = Mapping[str, Any]


def joined_text(parts: Iterable[Part]) -> str:
    """The text parts of ``parts`` joined with newlines; image parts are left out."""
    return "\n".join(str(part.get("text", "")) for part in parts if part.get("type") == "text")


def image_urls(parts: Iterable[Part]) -> list[str]:
    urls: list[str] = []
    for part in parts:
        if part.get("type") == "image":
            urls.extend(str(url) for url in part.get("image_urls") or ())
    return urls


def text_part(text: str) -> dict[str, Any]:
    """A ``TextContent`` as the SDK writes it."""
    return {"cache_prompt": False, "type": "text", "text": text}


def content_parts(text: str, urls: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The content list the SDK writes for ``text`` (no part when empty) and image URLs."""
    parts = [text_part(text)] if text else []
    urls = list(urls)
    if urls:
        parts.append({"cache_prompt": False, "type": "image", "image_urls": urls})
    return parts


def observation_parts(
    observation: Mapping[str, Any], content: list[Part]
) -> tuple[list[Part], bool]:
    """The parts the SDK sends for ``observation`` (whose ``content`` parts are given), and
    whether Treadle mirrors its class's rendering exactly (False: rendered by the base rule,
    the SDK may add more)."""
    kind = observation.get("kind")
    header = [text_part(ERROR_MESSAGE_HEADER)] if observation.get("is_error") else []
    if kind == "TerminalObservation":
        return [*header, text_part(_terminal_text(observation, content))], True
    return [*header, *content], kind not in OBSERVATIONS_RENDERED_OTHERWISE


def _terminal_text(observation: Mapping[str, Any], content: list[Part]) -> str:
    """``TerminalObservation.to_llm_content``: output framed by its metadata, truncated."""
    metadata = observation.get("metadata") or {}
    # Observation.text joins the text parts with nothing between them.
    output = "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    text = f"{metadata.get('prefix', '')}{output}{metadata.get('suffix', '')}"
    if metadata.get("working_dir"):
        text += f"\n[Current working directory: {metadata['working_dir']}]"
    if metadata.get("py_interpreter_path"):
        text += f"\n[Python interpreter: {metadata['py_interpreter_path']}]"
    exit_code = metadata.get("exit_code", -1)
    if exit_code != -1:
        text += f"\n[Command finished with exit code {exit_code}]"
    return _maybe_truncate(text, TERMINAL_OUTPUT_LIMIT, observation.get("full_output_save_dir"))


def _maybe_truncate(content: str, limit: int, save_dir: str | None) -> str:
    """``openhands.sdk.utils.truncate.maybe_truncate`` with ``tool_prefix="terminal"``, minus
    the file write: the name it would have saved the full output under is computed."""
    if len(content) <= limit:
        return content
    if len(_TRUNCATE_NOTICE) >= limit:
        return _TRUNCATE_NOTICE[:limit]
    available = limit - len(_TRUNCATE_NOTICE)
    proposed_head = available // 2 + (available % 2)
    notice = _TRUNCATE_NOTICE
    if save_dir:
        digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:8]
        notice = _TRUNCATE_NOTICE_WITH_PERSIST.format(
            file_path=f"{save_dir.rstrip('/')}/terminal_output_{digest}.txt",
            line_num=len(content[:proposed_head].splitlines()) + 1,
        )
    if len(notice) >= limit:
        return notice[:limit]
    remaining = limit - len(notice)
    head = min(proposed_head, remaining)
    tail = remaining - head
    return content[:head] + notice + (content[-tail:] if tail > 0 else "")
