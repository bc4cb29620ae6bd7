"""Changes to a stored conversation's settings made between runs: budgets raised, the model
changed. Each is stored in the conversation's settings and recorded in its log as a fact
(``budget``, ``model``) with what it was and what it became."""

from __future__ import annotations

from typing import Any

from treadle.data.model_change import MODEL_KEY, model_fact
from treadle.data.settings import ModelChoice
from treadle.runtime.budget import BUDGET_KEY, Budget, raised
from treadle.runtime.errors import NotRunnable
from treadle.runtime.log import ConversationLog
from treadle.runtime.settings import SETTINGS_KEY, ConversationSettings


def raise_budget(log: ConversationLog, budget: Budget) -> dict[str, Any]:
    """Raise the budgets ``budget`` gives (None: kept); the changes made, each with ``from``
    and ``to``. ``BudgetLowered`` when one would go down: a budget is never lowered under a
    log made with it."""
    metadata, stored = _stored_settings(log, "raise")
    changes = raised(stored, budget)
    if changes:
        update = {name: change["to"] for name, change in changes.items()}
        _store_settings(log, metadata, stored.model_copy(update=update))
        log.record_fact(BUDGET_KEY, changes)
    return changes


def change_model(log: ConversationLog, choice: ModelChoice) -> dict[str, Any] | None:
    """Make ``choice`` the model from now on (the other settings kept); the fact's value,
    None when it is the stored model already."""
    metadata, stored = _stored_settings(log, "change")
    if stored.model == choice:
        return None
    _store_settings(log, metadata, stored.model_copy(update={"model": choice}))
    change = {"from": model_fact(stored.model), "to": model_fact(choice)}
    log.record_fact(MODEL_KEY, change)
    return change


def _stored_settings(
    log: ConversationLog, verb: str
) -> tuple[dict[str, Any], ConversationSettings]:
    metadata = dict(log.store.get_conversation(log.id).metadata)
    stored = ConversationSettings.from_metadata(metadata)
    if stored is None:
        raise NotRunnable(f"conversation {log.id!r} has no settings to {verb}")
    return metadata, stored


def _store_settings(
    log: ConversationLog, metadata: dict[str, Any], settings: ConversationSettings
) -> None:
    metadata[SETTINGS_KEY] = settings.to_metadata()
    log.store.update_conversation(log.id, metadata=metadata)
