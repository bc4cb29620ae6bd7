"""The ``model`` fact: a continued conversation switched to another model from that point on
(``treadle run --conversation ID --model NAME``, ``--base-url URL`` or ``--script FILE``).

Its value is ``{from, to}``, each ``{kind, model, base_url, script}`` (never a key, never a
script's inline responses); the new model is stored in the conversation's settings as well, so
every later run of it, in any process, uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from treadle.events.fact_keys import MODEL_KEY as MODEL_KEY

if TYPE_CHECKING:
    from treadle.data.settings import ModelChoice


def model_fact(choice: ModelChoice) -> dict[str, Any]:
    """What the fact records of one model choice."""
    return {
        "kind": choice.kind,
        "model": choice.model,
        "base_url": choice.base_url,
        "script": choice.script,
    }


def model_text(value: Any) -> str:
    """One model of the fact (or of stored settings) in words: ``NAME at URL`` or
    ``scripted FILE``."""
    if not isinstance(value, dict):
        return "?"
    if value.get("kind") == "litellm":
        base = f" at {value['base_url']}" if value.get("base_url") else ""
        return f"{value.get('model') or '?'}{base}"
    return f"scripted {value.get('script') or '(inline)'}"


def model_change_text(value: Any) -> str | None:
    """The fact in words; None for a value of another shape (e.g. imported)."""
    if not isinstance(value, dict) or "from" not in value or "to" not in value:
        return None
    return f"model changed from {model_text(value['from'])} to {model_text(value['to'])}"
