"""What LiteLLM's model map says of an ``openai/NAME`` model (its input window, whether it is
priced), read from the map file LiteLLM ships, without importing LiteLLM.

Importing LiteLLM costs about 5 s of CPU and ~150 MB per process here: the lean
OpenAI-compatible client (``openai_model``) exists to stay clear of LiteLLM's per-call cost,
yet asked LiteLLM for the window of its model at the first step of every process (each server
worker, each ``treadle run``), only to learn, for a local endpoint's own name, that LiteLLM does
not know it. The map file is what LiteLLM itself reads (``LITELLM_LOCAL_MODEL_COST_MAP``, set
by ``import_litellm``): a 3.5 MB JSON object parsed once per process (~50 ms), looked up as
``litellm.get_model_info`` looks up an ``openai/`` name (the name itself, else the name without
its prefix when that entry is OpenAI's); tests check the two agree on every OpenAI model of the
map. Where the file cannot be found or read, the answer comes from LiteLLM as before.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MAP_FILE = "model_prices_and_context_window_backup.json"
"""The map's file in LiteLLM's package."""
PROVIDER_PREFIX = "openai/"


@functools.cache
def _model_map() -> Mapping[str, Any] | None:
    """The OpenAI entries of LiteLLM's packaged map (those an ``openai/NAME`` lookup can meet:
    ~220 of ~4,900; the whole map parsed is ~18 MB a process), or None when it cannot be read
    (then ask LiteLLM itself)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        try:
            loaded = json.loads((Path(folder) / MAP_FILE).read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(loaded, dict):
            return {
                name: entry
                for name, entry in loaded.items()
                if isinstance(entry, dict)
                and (name.startswith(PROVIDER_PREFIX) or entry.get("litellm_provider") == "openai")
            }
    return None


def openai_model_info(model: str) -> Mapping[str, Any] | None:
    """The map's entry of ``model`` (``openai/NAME``); None when the map does not know it.
    Raises ``LookupError`` when the map itself cannot be read."""
    known = _model_map()
    if known is None:
        raise LookupError(f"LiteLLM's model map ({MAP_FILE}) could not be read")
    exact = known.get(model)
    if isinstance(exact, dict):
        return exact
    bare = known.get(model.removeprefix(PROVIDER_PREFIX))
    if isinstance(bare, dict) and bare.get("litellm_provider") == "openai":
        return bare
    return None


def window_of(info: Mapping[str, Any] | None) -> int | None:
    """An entry's input window in tokens (None: unknown)."""
    if info is None:
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return window if isinstance(window, int) and window > 0 else None


def is_priced(info: Mapping[str, Any] | None) -> bool:
    """Whether an entry holds a price (else a response costs 0.0 and LiteLLM is not asked)."""
    return bool(info and (info.get("input_cost_per_token") or info.get("output_cost_per_token")))
