"""Condensation as a run extension: before a step's request, a condensation when it would
pass the token budget; after a provider refused a request as too long, the window it states
learned (a ``context_limit`` fact, kept for the conversation) and a condensation sized to it,
once per step (docs/contracts.md, CONDENSE)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from treadle.events.fact_keys import CONTEXT_LIMIT_KEY
from treadle.events.model import CondensationTrigger
from treadle.runtime.condense.condenser import Condenser
from treadle.runtime.condense.context import ContextView
from treadle.runtime.extensions.base import MADE_ROOM, RunExtension, RunScope
from treadle.runtime.llm.base import ContextWindowExceeded
from treadle.runtime.snapshots.facts import facts


class CondensationExtension(RunExtension):
    """``condenser`` None: condensation is off (the whole active path is sent), and a
    refusal ends the run saying so."""

    def __init__(self, condenser: Condenser | None, mask: Callable[[str], str]) -> None:
        self.condenser = condenser
        if condenser is not None:
            condenser.mask = mask  # its summaries never show a secret

    def opened(self, scope: RunScope) -> None:
        if self.condenser is None:
            return
        for _seq, fact in facts(scope.log.store, scope.conversation_id, CONTEXT_LIMIT_KEY):
            tokens = fact.value.get("tokens") if isinstance(fact.value, dict) else None
            if isinstance(tokens, int) and tokens > 0:  # what an earlier refusal taught
                self.condenser.learn_limit(tokens)

    def before_request(self, scope: RunScope) -> None:
        condenser = self.condenser
        if condenser is None or condenser.budget is None:
            return
        context = self._counted(scope)
        if condenser.over_budget(context):
            self._condense(
                scope,
                f"the next request would hold about {context.total} tokens, over the budget of "
                f"{condenser.budget}",
                "budget",
            )

    def after_refusal(
        self, scope: RunScope, error: ContextWindowExceeded, retried: bool
    ) -> Literal[True] | str | None:
        condenser = self.condenser
        if condenser is None:
            return "condensation is off for this conversation (--condense auto would shrink it)"
        if retried:
            return "it was refused again after condensing once in this step, so the run stops"
        # The window the refusal states (else half the refused request) is learned first and
        # kept for the conversation: what the condensation keeps is sized to it.
        learned = condenser.learn_from_refusal(self._counted(scope).total, str(error))
        scope.log.record_fact(CONTEXT_LIMIT_KEY, learned)
        why = "the provider refused the request: its context window is exceeded"
        if not self._condense(scope, why, "refusal"):
            return "nothing more can be condensed (the kept events alone are too long)"
        return MADE_ROOM

    def _counted(self, scope: RunScope) -> ContextView:
        """The context view, its items' tokens counted, up to the path's end."""
        assert self.condenser is not None
        if not scope.context.counting:
            scope.context.attach(self.condenser.sizes())
        return scope.followed()

    def _condense(self, scope: RunScope, reason: str, trigger: CondensationTrigger) -> bool:
        """Append a condensation of the active path (one summary call); False when the policy
        finds nothing to forget or the last event is already a condensation (CONDENSE-LOOP)."""
        condenser = self.condenser
        assert condenser is not None
        context = scope.followed()
        plan = condenser.plan(context)
        if plan is None:
            return False
        # The summary is a model call like a step's: an interrupt abandons it, drops its answer.
        condensation = scope.in_model_thread(
            lambda: condenser.condensation(context, plan, reason, trigger)
        )
        scope.log.append([condensation])
        scope.followed()
        return True
