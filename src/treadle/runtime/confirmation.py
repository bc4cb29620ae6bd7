"""Confirmation mode: which proposed calls wait for the user (never / always / risky).

The 'risky' policy asks a pluggable ``RiskAnalyzer``; the default one trusts each tool's own
``risky`` hint, and counts calls it cannot judge (unknown tool, bad arguments) as not risky
because they are answered by an agent error without running anything. ``choose_pending``
picks the calls a user's confirm or reject answers; ``rejections`` are its answers to a reject.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from treadle.data.settings import ConfirmationPolicy as ConfirmationPolicy  # settings data
from treadle.events.model import ActionEvent, UserRejectionEvent
from treadle.runtime.errors import NothingPending, NotPending, NotWaiting
from treadle.runtime.states import Op, Outcome, decide
from treadle.runtime.status import ConversationStatus
from treadle.runtime.tools import ToolCallError, ToolSet


class RiskAnalyzer(Protocol):
    def is_risky(self, action: ActionEvent, tools: ToolSet) -> bool: ...


class ToolHintRiskAnalyzer:
    """Risky when the called tool says so for these arguments."""

    def is_risky(self, action: ActionEvent, tools: ToolSet) -> bool:
        try:
            arguments = tools.validate(action.tool_name, action.arguments, action.raw_arguments)
        except ToolCallError:
            return False
        return tools.is_risky(action.tool_name, arguments)


def needs_confirmation(
    policy: ConfirmationPolicy,
    actions: list[ActionEvent],
    tools: ToolSet,
    analyzer: RiskAnalyzer,
) -> bool:
    """Whether this response's calls must wait for the user before any of them runs."""
    if policy is ConfirmationPolicy.NEVER:
        return False
    if policy is ConfirmationPolicy.ALWAYS:
        return True
    return any(analyzer.is_risky(action, tools) for action in actions)


def choose_pending(
    pending: list[ActionEvent], status: ConversationStatus, action_ids: Sequence[str] | None
) -> list[ActionEvent]:
    """The calls of ``pending`` (the path's calls without an answer) a confirm or reject of
    ``action_ids`` (None: all) answers, in the status the log records: ``NothingPending``,
    ``NotWaiting`` (a run, maybe in another process, is running them) or ``NotPending``."""
    if not pending:
        raise NothingPending()
    if decide(Op.CONFIRM, status, True).outcome is Outcome.NOT_WAITING:
        raise NotWaiting(status.value)
    if action_ids is None:
        return pending
    by_id = {action.id: action for action in pending}
    unknown = [action_id for action_id in action_ids if action_id not in by_id]
    if unknown:
        raise NotPending(unknown, by_id)
    return [by_id[action_id] for action_id in action_ids]


def rejections(chosen: Sequence[ActionEvent], reason: str) -> list[UserRejectionEvent]:
    """The user's answer to each call of ``chosen`` they refused."""
    return [
        UserRejectionEvent(
            action_id=action.id,
            tool_call_id=action.tool_call_id,
            tool_name=action.tool_name,
            reason=reason,
        )
        for action in chosen
    ]
