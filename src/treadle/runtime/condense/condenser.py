"""The condenser: decides when the model's context must shrink, asks the model for a summary of
what it forgets (one call, its usage recorded), and makes the ``condensation`` event.

When: the next request's prompt would pass the token budget (``budget``), or the provider
refused a request as too long (``refused``). What: ``policy.plan_condensation`` on the view
that ``context.ContextView`` follows. A summary call that fails still condenses, without a
summary, and the event's ``note`` says why (the run goes on with a shorter context).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from treadle.events.fact_keys import CONTEXT_LIMIT_KEY as CONTEXT_LIMIT_KEY
from treadle.events.model import CondensationEvent, CondensationTrigger
from treadle.events.projection import ViewItem
from treadle.runtime.condense.context import ContextView, TokenSizes, item_text
from treadle.runtime.condense.policy import CondensationPlan, head_end, plan_condensation
from treadle.runtime.llm.base import LanguageModel, ModelRequest, ModelResponse

logger = logging.getLogger(__name__)

BUDGET_SHARE_OF_WINDOW = 0.8
"""The budget when the model's window is known: this share of it (the rest is the answer's)."""
RECENT_SHARE = 0.5
"""The recent window a condensation keeps: this share of what the budget leaves besides the
head (system prompt with the tools' schemas, first user message); the rest is room to grow."""
SUMMARY_INPUT_SHARE = 0.5
"""The most of the budget the summary request may take (older forgotten items are cut)."""
ITEM_CHARS = 2000
"""Each forgotten item is shown to the summarizer cut to this many characters."""

_STATED_LIMIT = re.compile(
    r"(?:maximum context length|context window|context length)(?: is| of)?\s+(?:only\s+)?"
    r"([\d,]{3,})\s*tokens",
    re.IGNORECASE,
)

SUMMARY_PROMPT = (
    "You condense the history of a software agent's conversation so that it can go on with a "
    "shorter context. Summarize the events below (and the earlier summary, if any): the user's "
    "goal, what was done and found, files changed, commands run and their outcomes, decisions, "
    "and what remains to do. Be factual and brief; keep names, paths and numbers exact."
)


class Condenser:
    """Condensation for one conversation. ``context_tokens``: the budget a request may hold,
    else ``window`` is asked (once, on first use) for the model's input window; neither: only
    a provider's refusal triggers. ``count``: the model's token counter."""

    def __init__(
        self,
        model: LanguageModel,
        count: Callable[[str], int],
        *,
        context_tokens: int | None = None,
        window: Callable[[], int | None] | None = None,
        mask: Callable[[str], str] = lambda text: text,
    ) -> None:
        self.model = model
        self.count = count
        self.mask = mask
        self._context_tokens = context_tokens
        self._window = window
        self._budget: int | None = None
        self._budget_known = False
        self._limit: int | None = None
        """The window a refusal taught (None: none yet): the budget never exceeds its share."""

    @property
    def budget(self) -> int | None:
        """The tokens a request may hold (``budget_for``); None: only a refusal triggers."""
        if not self._budget_known:
            window = None
            if self._context_tokens is None and self._window is not None:
                window = self._window()
            self._budget = budget_for(self._context_tokens, window)
            self._budget_known = True
        if self._limit is not None:
            learned = int(self._limit * BUDGET_SHARE_OF_WINDOW)
            return learned if self._budget is None else min(self._budget, learned)
        return self._budget

    def learn_limit(self, tokens: int) -> None:
        """Take ``tokens`` as the provider's window (the smallest taught so far wins)."""
        self._limit = tokens if self._limit is None else min(self._limit, tokens)

    def learn_from_refusal(self, refused_tokens: int, message: str) -> dict[str, Any]:
        """After a provider refused a request of about ``refused_tokens`` as too long: its
        window, as the refusal states it ("maximum context length is 8000 tokens"), else half
        the refused request; learned, and returned as the ``context_limit`` fact to record."""
        stated = stated_limit(message)
        if stated is not None and stated < refused_tokens:
            tokens, source = stated, "provider"
        else:  # unstated (or a number that cannot be the window): halve what was refused
            tokens, source = max(1, refused_tokens // 2), "halved"
        self.learn_limit(tokens)
        return {
            "tokens": tokens,
            "source": source,
            "refused_tokens": refused_tokens,
            "budget": self.budget,
        }

    def sizes(self) -> TokenSizes:
        return TokenSizes(self.count)

    def over_budget(self, context: ContextView) -> bool:
        return self.budget is not None and context.total > self.budget

    def plan(self, context: ContextView) -> CondensationPlan | None:
        """What a condensation of ``context`` now would forget (None: nothing can be, or it
        would follow another with nothing new between them, CONDENSE-LOOP)."""
        if not context.may_condense:
            return None
        if not context.counting:
            context.attach(self.sizes())
        sizes = context.item_sizes()
        target = self.budget if self.budget is not None else context.total
        kept_head = sum(sizes[: head_end(context.view)])
        keep = max(0, int((target - kept_head) * RECENT_SHARE))
        plan = plan_condensation(context.view, sizes, keep_recent_tokens=keep)
        # What is kept must fit the budget (with room for the summary): a smaller recent
        # window until it does, or until only the last whole unit is left.
        while plan is not None and keep > 0 and kept_head + sum(sizes[plan.tail :]) > target:
            keep //= 2
            plan = plan_condensation(context.view, sizes, keep_recent_tokens=keep) or plan
        return plan

    def condensation(
        self,
        context: ContextView,
        plan: CondensationPlan,
        reason: str,
        trigger: CondensationTrigger,
    ) -> CondensationEvent:
        """The event for ``plan``, with the model's summary of what it forgets (one call);
        ``reason`` is its note, ``trigger`` what made it."""
        messages = self.summary_request(plan.forgotten, context)
        try:
            response = _summary_response(self.model, messages, context.condensations)
            if not response.text.strip():
                raise ValueError("the model answered the summary request with no text")
        except Exception as error:  # any failure: condense anyway, say so in the event
            cause = self.mask(f"{type(error).__name__}: {error}"[:500])
            logger.warning("condensation without a summary (%s): %s", reason, cause)
            return CondensationEvent(
                forgotten_event_ids=plan.forgotten_ids,
                note=f"{reason}; no summary: the summary call failed ({cause})",
                trigger=trigger,
            )
        return CondensationEvent(
            forgotten_event_ids=plan.forgotten_ids,
            summary=response.text,
            summary_offset=plan.summary_offset,
            llm_response_id=response.id,
            usage=response.usage,
            note=reason,
            trigger=trigger,
        )

    def summary_request(
        self, forgotten: Sequence[ViewItem], context: ContextView
    ) -> list[dict[str, Any]]:
        """The summary call's messages: the forgotten items, newest kept first when they do
        not all fit in ``SUMMARY_INPUT_SHARE`` of the budget (an earlier summary among them
        stands for what came before it)."""
        room = int((self.budget or context.total or 1) * SUMMARY_INPUT_SHARE)
        shown: list[str] = []
        used = 0
        for item in reversed(forgotten):
            text = _describe(item)
            # A cut item costs less than its count; an uncounted one is guessed from its length.
            cost = min(len(text) // 3, context.size(item)) if context.counting else len(text) // 4
            if shown and used + cost > room:
                break
            shown.append(text)
            used += cost
        left_out = len(forgotten) - len(shown)
        body = "\n\n".join(reversed(shown))
        if left_out:
            body = f"({left_out} earlier events are left out)\n\n{body}"
        return [
            {"role": "system", "content": SUMMARY_PROMPT},
            {"role": "user", "content": body},
        ]


def _describe(item: ViewItem) -> str:
    text = item_text(item)
    if len(text) > ITEM_CHARS:
        text = text[:ITEM_CHARS] + "…(cut)"
    kind = item.kind
    if kind == "message":
        return f"[{getattr(item, 'role', 'user')}] {text}"
    if kind == "summary":
        return f"[earlier summary] {text}"
    return f"[{kind}] {text}"


def _summary_response(
    model: LanguageModel, messages: list[dict[str, Any]], number: int
) -> ModelResponse:
    return model.complete(ModelRequest(messages, (), "summary", summaries_before=number))


def stated_limit(message: str) -> int | None:
    """The context window a provider's refusal states ("maximum context length is 8000
    tokens"), or None."""
    found = _STATED_LIMIT.search(message)
    if found is None:
        return None
    digits = found.group(1).replace(",", "")
    return int(digits) if digits.isdigit() else None


def budget_for(context_tokens: int | None, window: int | None) -> int | None:
    """The token budget: ``context_tokens`` when given, else ``BUDGET_SHARE_OF_WINDOW`` of the
    model's known input window, else None (condense only on a provider's refusal)."""
    if context_tokens is not None:
        return context_tokens
    if window is not None:
        return int(window * BUDGET_SHARE_OF_WINDOW)
    return None
