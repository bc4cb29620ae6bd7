"""Hooks as a run extension: ``UserPromptSubmit`` before a user message is stored,
``PreToolUse`` before calls run, ``PostToolUse`` on their results, ``Stop`` as the agent ends
its turn (docs/hooks.md). Each hook's run is recorded as a ``hook`` fact."""

from __future__ import annotations

from treadle.events.model import ActionEvent, Event, MessageEvent
from treadle.runtime.extensions.base import CallResult, RunExtension, RunScope, Screened
from treadle.runtime.hooks import ConversationHooks


class HooksExtension(RunExtension):
    def __init__(self, hooks: ConversationHooks) -> None:
        self.hooks = hooks

    def screen_message(self, scope: RunScope, text: str) -> list[Event]:
        context = self.hooks.before_prompt(text, scope.log.record_fact)  # PromptBlocked
        return [self.hooks.context_message(context)] if context else []

    def run_started(self, scope: RunScope) -> None:
        self.hooks.new_run()

    def screen_calls(self, scope: RunScope, screened: Screened) -> Screened:
        # A hook never lets a call skip the confirmation the policy asks for: "ask" only adds.
        by_hooks = self.hooks.before_calls(screened.allowed, scope.log.record_fact)
        return Screened(
            by_hooks.allowed,
            [*screened.rejections, *by_hooks.rejections],
            screened.ask or by_hooks.ask,
        )

    def after_call(self, scope: RunScope, action: ActionEvent, result: CallResult) -> CallResult:
        return self.hooks.after_call(action, result, scope.log.record_fact)

    def at_stop(self, scope: RunScope, last_message: str) -> MessageEvent | None:
        return self.hooks.at_stop(last_message, scope.log.record_fact)
