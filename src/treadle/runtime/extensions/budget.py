"""Budgets as a run extension: before each model call (a step's or a summary's), the
conversation's stored budgets against the usage totals the store keeps at append time; a
budget reached pauses the run, its reason naming the budget (docs/contracts.md, RUN)."""

from __future__ import annotations

from treadle.events.usage import UsageTotals
from treadle.runtime.budget import Budget
from treadle.runtime.extensions.base import RunExtension, RunScope


class BudgetExtension(RunExtension):
    def before_model_call(self, scope: RunScope) -> str | None:
        # Read from the conversation's row: budgets raised by any process count at once.
        info = scope.conversation_row()
        budget = Budget.from_metadata(info.metadata)
        if not budget.limited:
            return None
        totals = UsageTotals(info.prompt_tokens, info.completion_tokens, info.cost_usd)
        return budget.reached(totals)
