"""Model prices for an eval's budget: whether LiteLLM can price a model (a budget with one it
cannot is refused before the run, never silently off), prices given by hand
(``--price-per-mtok IN,OUT`` or ``TREADLE_PRICE_PER_MTOK``), and a response priced by them."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

PRICE_ENV = "TREADLE_PRICE_PER_MTOK"
"""The settings' way to give prices: ``IN,OUT`` in USD per million tokens."""


class PriceError(ValueError):
    """Prices that are not two non-negative numbers."""


def parse_prices(text: str, *, source: str = "--price-per-mtok") -> tuple[float, float]:
    """``IN,OUT`` as two finite non-negative numbers (USD per million input, output tokens)."""
    parts = text.split(",")
    try:
        values = tuple(float(part) for part in parts)
    except ValueError:
        values = ()
    if len(values) != 2 or not all(math.isfinite(v) and 0 <= v < 1e6 for v in values):
        raise PriceError(
            f"{source} {text[:60]!r}: give IN,OUT, USD per million input and output tokens "
            "(e.g. 0.15,0.60)"
        )
    return values[0], values[1]


def prices_from_settings(given: str | None) -> tuple[float, float] | None:
    """The prices given (the option first, then ``TREADLE_PRICE_PER_MTOK``), or None."""
    if given is not None:
        return parse_prices(given)
    text = os.environ.get(PRICE_ENV)
    return parse_prices(text, source=PRICE_ENV) if text else None


def litellm_can_price(model: str) -> bool:
    """Whether LiteLLM's own price map (read offline) prices ``model``'s tokens."""
    from treadle.runtime.llm.litellm_model import import_litellm

    litellm = import_litellm()
    try:
        prompt, completion = litellm.cost_per_token(
            model=model, prompt_tokens=1_000_000, completion_tokens=1_000_000
        )
    except Exception:  # LiteLLM raises for a model it does not know
        return False
    return bool(prompt or completion)


def priced(response: Any, prices: tuple[float, float]) -> Any:
    """``response`` (a ModelResponse) with its cost from its tokens when it has none."""
    usage = response.usage
    if usage.cost_usd:
        return response
    cost = (usage.prompt_tokens * prices[0] + usage.completion_tokens * prices[1]) / 1e6
    return dataclasses.replace(response, usage=usage.model_copy(update={"cost_usd": cost}))
