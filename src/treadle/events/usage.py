"""What a log's model calls cost: the one rule that says which events carry a model call's
usage, and the totals of a log (tokens and cost of every model call, on every branch: a call
on a branch left behind was paid for too).

Stores keep these totals per conversation at append time (``treadle.store.usage_totals``);
``usage_totals_of`` computes them from the events, for a migration and for tests."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from treadle.events.model import (
    ActionEvent,
    CondensationEvent,
    EventBase,
    MessageEvent,
    TokenUsage,
)

_USAGE_CLASSES = (ActionEvent, MessageEvent, CondensationEvent)
USAGE_KINDS: tuple[str, ...] = tuple(cls.model_fields["kind"].default for cls in _USAGE_CLASSES)
"""The kinds of event that may record a model call's usage (``usage_of``)."""


def usage_of(event: EventBase) -> TokenUsage | None:
    """The usage ``event`` records: a model response's (an action or an agent message), or a
    condensation's summary call; else None."""
    if isinstance(event, _USAGE_CLASSES):
        return event.usage
    return None


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Prompt tokens, completion tokens and cost in USD (a float sum) of model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def usage_totals_of(events: Iterable[EventBase]) -> UsageTotals:
    """The totals of every usage ``events`` record."""
    prompt = completion = 0
    cost = 0.0
    for event in events:
        usage = usage_of(event)
        if usage is not None:
            prompt += usage.prompt_tokens
            completion += usage.completion_tokens
            cost += usage.cost_usd
    return UsageTotals(prompt, completion, cost)


__all__ = ["USAGE_KINDS", "UsageTotals", "usage_of", "usage_totals_of"]
