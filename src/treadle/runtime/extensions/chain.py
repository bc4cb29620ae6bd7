"""The capabilities of a conversation's run loop, in the one order the loop calls them at
each of its points (``run_extensions``), and the chain that calls them (``RunExtensions``).

Adding a capability: a module with a ``RunExtension`` and one line in ``run_extensions``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

from treadle.events.model import ActionEvent, Event, MessageEvent, SystemPromptEvent
from treadle.runtime.extensions.base import (
    MADE_ROOM,
    CallResult,
    RunExtension,
    RunScope,
    Screened,
)
from treadle.runtime.extensions.budget import BudgetExtension
from treadle.runtime.extensions.condensation import CondensationExtension
from treadle.runtime.extensions.hooks import HooksExtension
from treadle.runtime.extensions.skills import SkillsExtension
from treadle.runtime.extensions.snapshots import SnapshotsExtension
from treadle.runtime.hooks import ConversationHooks
from treadle.runtime.llm.base import ContextWindowExceeded
from treadle.runtime.parts import ConversationParts
from treadle.runtime.skills import WorkspaceSkills

E = TypeVar("E", bound=RunExtension)


def run_extensions(
    parts: ConversationParts, hooks: ConversationHooks, skills: WorkspaceSkills
) -> list[RunExtension]:
    """The extensions ``parts`` ask for, in calling order: what shapes the first event and
    each message (skills), what screens them and the calls (hooks), what may stop a model
    call (budgets), what shrinks a request (condensation), what records files (snapshots,
    after the batch's results are stored), then the caller's own (``parts.extensions``)."""
    extensions: list[RunExtension] = [
        SkillsExtension(skills),
        HooksExtension(hooks),
        BudgetExtension(),
        CondensationExtension(parts.condenser, parts.secrets.mask),
    ]
    if parts.snapshots is not None:
        extensions.append(SnapshotsExtension(parts.snapshots, parts.agent.tools))
    extensions.extend(parts.extensions)
    return extensions


class RunExtensions:
    """Calls each extension at a point, in order: a value one returns is what the next one
    gets (an event, a message, the calls screened); the first that stops or keeps a run
    going decides."""

    def __init__(self, extensions: Sequence[RunExtension], scope: RunScope) -> None:
        self.extensions = list(extensions)
        self.scope = scope

    def find(self, kind: type[E]) -> E | None:
        """The first extension of ``kind`` in the chain, None when the parts gave none."""
        return next((e for e in self.extensions if isinstance(e, kind)), None)

    def opened(self) -> None:
        for extension in self.extensions:
            extension.opened(self.scope)

    def system_prompt(self, event: SystemPromptEvent) -> SystemPromptEvent:
        for extension in self.extensions:
            event = extension.system_prompt(self.scope, event)
        return event

    def conversation_started(self) -> None:
        for extension in self.extensions:
            extension.conversation_started(self.scope)

    def screen_message(self, text: str) -> list[Event]:
        return [e for ext in self.extensions for e in ext.screen_message(self.scope, text)]

    def shape_message(self, message: MessageEvent) -> MessageEvent:
        for extension in self.extensions:
            message = extension.shape_message(self.scope, message)
        return message

    def run_started(self) -> None:
        for extension in self.extensions:
            extension.run_started(self.scope)

    def before_model_call(self) -> str | None:
        for extension in self.extensions:
            if (why := extension.before_model_call(self.scope)) is not None:
                return why
        return None

    def before_request(self) -> None:
        for extension in self.extensions:
            extension.before_request(self.scope)

    def after_refusal(self, error: ContextWindowExceeded, retried: bool) -> str | None:
        """None when an extension made room (the request is made again), else why the run
        stops."""
        reasons = []
        for extension in self.extensions:
            answer: Literal[True] | str | None = extension.after_refusal(self.scope, error, retried)
            if answer is MADE_ROOM:
                return None
            if isinstance(answer, str):
                reasons.append(answer)
        return "; ".join(reasons) or "nothing in this conversation can shrink its requests"

    def screen_calls(self, actions: Sequence[ActionEvent]) -> Screened:
        screened = Screened(list(actions))
        for extension in self.extensions:
            if not screened.allowed:
                break
            screened = extension.screen_calls(self.scope, screened)
        return screened

    def after_call(self, action: ActionEvent, result: CallResult) -> CallResult:
        for extension in self.extensions:
            result = extension.after_call(self.scope, action, result)
        return result

    def after_batch(self, actions: Sequence[ActionEvent]) -> None:
        for extension in self.extensions:
            extension.after_batch(self.scope, actions)

    def at_stop(self, last_message: str) -> MessageEvent | None:
        for extension in self.extensions:
            if (message := extension.at_stop(self.scope, last_message)) is not None:
                return message
        return None
