"""Confirmation mode: which proposed calls wait for the user (never / always / risky).

The 'risky' policy asks a pluggable ``RiskAnalyzer``; the default one trusts each tool's own
``risky`` hint, and counts calls it cannot judge (unknown tool, bad arguments) as not risky
because they are answered by an agent error without running anything.
"""

from __future__ import annotations

from typing import Protocol

from treadle.api.settings import ConfirmationPolicy as ConfirmationPolicy  # settings data
from treadle.events.model import ActionEvent
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
