"""The hooks of a recorded replay: what the recorded hooks decided, given again without running
any command (a recorded replay runs nothing): the calls they blocked are rejected with the
recorded reasons, and the messages they added (context after a user message, a Stop hook that
kept the agent going) come back where they were recorded. A hook's context inside a call's
result is already in the recorded result the replayed tool returns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import pairwise

from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    UserRejectionEvent,
)
from treadle.runtime.hooks import ConversationHooks, Screened
from treadle.runtime.hooks.conversation_hooks import RecordFact
from treadle.runtime.replay.recording import Recording
from treadle.runtime.secrets import Secrets


class RecordedHooks(ConversationHooks):
    """Hooks answering from ``recording``; each recorded hook message given once, in order."""

    def __init__(self, recording: Recording) -> None:
        super().__init__((), None, Secrets())
        self._recording = recording
        self._messages = deque(_hook_messages(recording.path))
        """(what the hook message follows: ``prompt`` or ``stop``, its text), in path order."""

    def before_calls(self, actions: Sequence[ActionEvent], record: RecordFact) -> Screened:
        screened = Screened([])
        for action in actions:
            result = self._recording.results.get(action.tool_call_id)
            if isinstance(result, UserRejectionEvent) and result.rejected_by == "hook":
                screened.rejections.append(
                    UserRejectionEvent(
                        source=result.source,
                        action_id=action.id,
                        tool_call_id=action.tool_call_id,
                        tool_name=action.tool_name,
                        reason=result.reason,
                        rejected_by="hook",
                    )
                )
            else:
                screened.allowed.append(action)
        return screened

    def after_call(
        self, action: ActionEvent, event: ObservationEvent | AgentErrorEvent, record: RecordFact
    ) -> ObservationEvent | AgentErrorEvent:
        return event

    def before_prompt(self, text: str, record: RecordFact) -> str | None:
        return self._next("prompt")

    def at_stop(self, last_message: str, record: RecordFact) -> MessageEvent | None:
        text = self._next("stop")
        return None if text is None else MessageEvent(source="hook", text=text)

    def _next(self, after: str) -> str | None:
        if self._messages and self._messages[0][0] == after:
            return self._messages.popleft()[1]
        return None


def _hook_messages(path: Sequence[Event]) -> list[tuple[str, str]]:
    """The hook messages of ``path``: after a user message, a UserPromptSubmit hook's context;
    after the agent's answer or a result (``finish``), a Stop hook's."""
    found = []
    for before, event in pairwise(path):
        if isinstance(event, MessageEvent) and event.source == "hook":
            user = isinstance(before, MessageEvent) and before.source == "user"
            found.append(("prompt" if user else "stop", event.text))
    return found
