"""A conversation's hooks: which run at each point of the run loop, what their decisions make
of a call, a result, a prompt or the end of a turn, and the ``hook`` fact each run leaves.

The conversation asks; this never touches the store: it returns the events to append and
records its facts through the callable it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treadle.data.hooks import HookCommand, HookEventName, HookSettings
from treadle.events.fact_keys import HOOK_KEY as HOOK_KEY
from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    MessageEvent,
    ObservationEvent,
    UserRejectionEvent,
)
from treadle.runtime.errors import ConversationError
from treadle.runtime.extensions.base import Screened as Screened
from treadle.runtime.hooks.process import run_hook
from treadle.runtime.hooks.replies import HookVerdict, verdict
from treadle.runtime.secrets import Secrets
from treadle.runtime.text import storable_text
from treadle.runtime.workspace.base import Workspace

MAX_STOP_CONTINUATIONS = 3
"""How many times ``Stop`` hooks may keep the agent going in one run (then the turn ends)."""

RecordFact = Callable[[str, dict[str, Any]], None]


class PromptBlocked(ConversationError):
    """A ``UserPromptSubmit`` hook refused the message: it was not stored."""


@dataclass(frozen=True)
class HookSource:
    """Hooks from one place; ``mount_files``: whether the files their commands name may be
    shown inside a sandbox (the user's or the operator's hooks; never a client's, never the
    workspace's own, which could name any file of the host)."""

    settings: HookSettings
    mount_files: bool


class ConversationHooks:
    """The hooks one conversation object runs, in its workspace (and sandbox)."""

    def __init__(
        self,
        sources: Sequence[HookSource],
        workspace: Workspace | None,
        secrets: Secrets,
        *,
        ignored_workspace_file: Path | None = None,
    ) -> None:
        self._sources = [source for source in sources if not source.settings.empty]
        self._workspace = workspace
        self._secrets = secrets
        self.ignored_workspace_file = ignored_workspace_file
        """The workspace's settings file whose hooks were NOT loaded (no trust given)."""
        self._context: dict[str, str] = {}
        """PreToolUse context per action id, added to that call's result."""
        self._stop_continuations = 0
        self._session_id = ""
        self._interruption: threading.Event | None = None

    def attach(self, conversation_id: str, interruption: threading.Event) -> None:
        """Run for this conversation (told to hooks as Claude Code's ``session_id``); a hook
        in progress stops when ``interruption`` is set (the user interrupted the run)."""
        self._session_id = conversation_id
        self._interruption = interruption

    def copied(self) -> ConversationHooks:
        """The same hooks for another conversation (a fork sharing this one's workspace)."""
        return ConversationHooks(
            self._sources,
            self._workspace,
            self._secrets,
            ignored_workspace_file=self.ignored_workspace_file,
        )

    @classmethod
    def none(cls) -> ConversationHooks:
        return cls((), None, Secrets())

    @property
    def active(self) -> bool:
        return bool(self._sources)

    def new_run(self) -> None:
        """A run starts: ``Stop`` hooks may keep it going ``MAX_STOP_CONTINUATIONS`` times."""
        self._stop_continuations = 0

    # -- the points of the run loop ----------------------------------------------------------

    def before_calls(self, actions: Sequence[ActionEvent], record: RecordFact) -> Screened:
        """``PreToolUse`` for each call, in call order, before confirmation and before any
        runs: a blocked call is answered by a rejection (``rejected_by="hook"``)."""
        if not self.active:
            return Screened(list(actions))
        screened = Screened([])
        for action in actions:
            payload = {
                "tool_name": action.tool_name,
                "tool_input": dict(action.arguments) if action.arguments is not None else {},
                "tool_use_id": action.tool_call_id,
            }
            result = self._run("PreToolUse", payload, record, action.tool_name, action.id)
            if result.reason is not None:
                screened.rejections.append(
                    UserRejectionEvent(
                        source="hook",
                        action_id=action.id,
                        tool_call_id=action.tool_call_id,
                        tool_name=action.tool_name,
                        reason=f"blocked by a PreToolUse hook: {result.reason}",
                        rejected_by="hook",
                    )
                )
                continue
            if result.context:
                self._context[action.id] = result.context
            screened.allowed.append(action)
            screened.ask = screened.ask or result.ask
        return screened

    def after_call(
        self, action: ActionEvent, event: ObservationEvent | AgentErrorEvent, record: RecordFact
    ) -> ObservationEvent | AgentErrorEvent:
        """The call's result with what its hooks add: the ``PreToolUse`` context, and for a
        tool's own result, what ``PostToolUse`` hooks say (they run after the fact: they
        cannot block, their reason is context)."""
        notes = [self._context.pop(action.id)] if action.id in self._context else []
        if self.active and isinstance(event, ObservationEvent):
            payload = {
                "tool_name": action.tool_name,
                "tool_input": dict(action.arguments) if action.arguments is not None else {},
                "tool_use_id": action.tool_call_id,
                "tool_response": {
                    "content": event.content,
                    "is_error": event.is_error,
                    "data": _plain(event.data),
                },
            }
            result = self._run("PostToolUse", payload, record, action.tool_name, action.id)
            notes += [text for text in (result.reason, result.context) if text]
        if not notes:
            return event
        added = "\n".join(f"[hook] {note}" for note in notes)
        if isinstance(event, ObservationEvent):
            return event.model_copy(update={"content": storable_text(f"{event.content}\n{added}")})
        return event.model_copy(update={"error": storable_text(f"{event.error}\n{added}")})

    def before_prompt(self, text: str, record: RecordFact) -> str | None:
        """``UserPromptSubmit``: the context to add after the message (None: none);
        ``PromptBlocked`` when a hook refuses it."""
        if not self.active:
            return None
        result = self._run("UserPromptSubmit", {"prompt": text}, record)
        if result.reason is not None:
            raise PromptBlocked(
                f"the message was blocked by a UserPromptSubmit hook: {result.reason}"
            )
        return result.context

    def at_stop(self, last_message: str, record: RecordFact) -> MessageEvent | None:
        """``Stop``, when the agent ends its turn: a message that keeps it going (a hook
        blocked the stop, its reason the message), at most ``MAX_STOP_CONTINUATIONS`` times
        per run; None: the turn ends."""
        if not self.active or self._stop_continuations >= MAX_STOP_CONTINUATIONS:
            return None
        payload = {
            "stop_hook_active": self._stop_continuations > 0,
            "last_assistant_message": last_message,
        }
        result = self._run("Stop", payload, record)
        if result.reason is None:
            return None
        self._stop_continuations += 1
        return MessageEvent(source="hook", text=result.reason)

    def context_message(self, context: str) -> MessageEvent:
        """The context a ``UserPromptSubmit`` hook added, as a message after the user's."""
        return MessageEvent(source="hook", text=context)

    # -- running ----------------------------------------------------------------------------

    def _run(
        self,
        event: HookEventName,
        payload: dict[str, Any],
        record: RecordFact,
        tool_name: str | None = None,
        action_id: str | None = None,
    ) -> HookVerdict:
        """Every hook of ``event`` for ``tool_name``, one after the other; their verdicts
        joined: blocked when one blocks (every blocking reason said), contexts added up."""
        assert self._workspace is not None
        reasons: list[str] = []
        contexts: list[str] = []
        ask = False
        for hook, mount_files in self._commands(event, tool_name):
            full = {
                "session_id": self._session_id,
                "cwd": str(self._workspace.root),
                "hook_event_name": event,
                **payload,
            }
            run = run_hook(
                hook,
                full,
                self._workspace,
                mount_files=mount_files,
                interruption=self._interruption,
            )
            said = verdict(event, hook, run)
            self._record(record, event, hook, run.exit_code, run.seconds, said, action_id)
            if said.reason is not None:
                reasons.append(self._shown(said.reason))
            if said.context:
                contexts.append(self._shown(said.context))
            ask = ask or said.ask
        return HookVerdict(
            "block" if reasons else "context" if contexts else "none",
            reason="; ".join(reasons) if reasons else None,
            context="\n".join(contexts) if contexts else None,
            ask=ask,
        )

    def _commands(
        self, event: HookEventName, tool_name: str | None
    ) -> list[tuple[HookCommand, bool]]:
        return [
            (hook, source.mount_files)
            for source in self._sources
            for hook in source.settings.commands(event, tool_name)
        ]

    def _shown(self, text: str) -> str:
        """What a hook said, as the model and the log may see it (secrets masked)."""
        return storable_text(self._secrets.mask(text.strip()))

    def _record(
        self,
        record: RecordFact,
        event: HookEventName,
        hook: HookCommand,
        exit_code: int | None,
        seconds: float,
        said: HookVerdict,
        action_id: str | None,
    ) -> None:
        fact: dict[str, Any] = {
            "hook": event,
            "command": self._secrets.mask(hook.command),
            "exit_code": exit_code,
            "seconds": round(seconds, 3),
            "decision": said.decision,
            "action_id": action_id,
        }
        if said.failure is not None:
            fact["failure"] = self._shown(said.failure)
        if said.ask:
            fact["ask"] = True  # the call waits for the user's confirmation
        record(HOOK_KEY, fact)


def _plain(value: Any) -> Any:
    """A frozen JSON value (read-only dicts, tuples) as plain JSON for a hook's input."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
