"""Budgets of a conversation: the most its model calls may cost (USD) and the most tokens they
may use, in all (every branch, summary calls included: ``treadle.events.usage``). The run
checks them before each model call against the totals its store keeps at append time; one
reached pauses the run with a reason naming the budget and the figures. A budget may be
raised (never lowered) on a stored conversation; the change is recorded in its log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treadle.data.settings import SETTINGS_KEY, ConversationSettings
from treadle.errors import TreadleError
from treadle.events.fact_keys import BUDGET_KEY as BUDGET_KEY
from treadle.events.usage import UsageTotals

BUDGET_REACHED = "budget reached"
"""How the reason of a run paused by a budget begins (``docs/contracts.md``, RUN)."""


class BudgetLowered(TreadleError, ValueError):
    """A budget given for a stored conversation is below its stored one (or removes it)."""


@dataclass(frozen=True, slots=True)
class Budget:
    """The limits of one conversation; None: no limit."""

    max_cost_usd: float | None = None
    max_total_tokens: int | None = None

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> Budget:
        """The budgets a conversation's stored settings set (read without validating the
        whole settings: this is read before every model call)."""
        settings = metadata.get(SETTINGS_KEY)
        if not isinstance(settings, dict):
            return cls()
        cost, tokens = settings.get("max_cost_usd"), settings.get("max_total_tokens")
        return cls(
            float(cost) if isinstance(cost, int | float) else None,
            tokens if isinstance(tokens, int) else None,
        )

    @property
    def limited(self) -> bool:
        return self.max_cost_usd is not None or self.max_total_tokens is not None

    def reached(self, totals: UsageTotals) -> str | None:
        """Why no further model call may be made with ``totals`` spent, or None."""
        reached: list[str] = []
        if self.max_total_tokens is not None and totals.tokens >= self.max_total_tokens:
            reached.append(f"max_total_tokens {self.max_total_tokens:,} (used {totals.tokens:,})")
        if self.max_cost_usd is not None and totals.cost_usd >= self.max_cost_usd:
            reached.append(f"max_cost_usd ${self.max_cost_usd:.6f} (used ${totals.cost_usd:.6f})")
        if not reached:
            return None
        return f"{BUDGET_REACHED}: {'; '.join(reached)}; raise it to continue"


def raised(stored: ConversationSettings, budget: Budget) -> dict[str, Any]:
    """The changes ``budget`` makes to ``stored``'s budgets, as ``{field: {"from", "to"}}``
    (only the fields it gives that differ); ``BudgetLowered`` when one would go down."""
    changes: dict[str, Any] = {}
    for name, new in (
        ("max_cost_usd", budget.max_cost_usd),
        ("max_total_tokens", budget.max_total_tokens),
    ):
        old = getattr(stored, name)
        if new is None or new == old:
            continue
        if old is not None and new < old:
            raise BudgetLowered(
                f"{name} can only be raised on a stored conversation: it is {old}, {new} was given"
            )
        changes[name] = {"from": old, "to": new}
    return changes


__all__ = ["BUDGET_KEY", "BUDGET_REACHED", "Budget", "BudgetLowered", "raised"]
