"""The skills of a replay: what the recording's system prompt and user messages carried, given
again without reading any workspace file, so a replay reproduces each skill activation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from treadle.events.model import EventBase, MessageEvent, SystemPromptEvent
from treadle.runtime.replay.recording import Recording
from treadle.runtime.skills import LoadedSkills, WorkspaceSkills


class RecordedSkills(WorkspaceSkills):
    """Skills answering from ``recording``: its system prompt's context, and each user message's
    skills given to the replayed message sent in its place (in order, as the driver sends)."""

    def __init__(self, recording: Recording) -> None:
        super().__init__(LoadedSkills())
        self._system = next((e for e in recording.path if isinstance(e, SystemPromptEvent)), None)
        # The messages a replay sends: as ``recording`` lists its "send" inputs.
        self._messages = deque(
            event
            for event in recording.path
            if isinstance(event, MessageEvent) and event.source not in ("agent", "hook")
        )

    def added_to_system_prompt(self, event: SystemPromptEvent) -> SystemPromptEvent:
        recorded = self._system
        if recorded is None or (recorded.context is None and not recorded.skills):
            return event
        return event.model_copy(update={"context": recorded.context, "skills": recorded.skills})

    def added_to_message(self, message: MessageEvent, path: Sequence[EventBase]) -> MessageEvent:
        if not self._messages:
            return message
        recorded = self._messages.popleft()
        if recorded.text != message.text:  # out of step: the comparison reports the text
            return message
        return message.model_copy(
            update={
                "activated_skills": recorded.activated_skills,
                "extended_content": recorded.extended_content,
            }
        )

    def fact(self) -> dict[str, Any] | None:
        return None  # nothing was loaded: the recording's fact is off the path it compares
