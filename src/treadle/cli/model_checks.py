"""What ``treadle run`` and ``treadle eval run`` check before anything is created or spent: that
LiteLLM knows the model's provider and that a key is there when the provider needs one; and
``--api-key-file FILE``, the model key kept out of argv (where every local user sees it)."""

from __future__ import annotations

import os
from pathlib import Path

from treadle.cli.output import EXIT_BAD_INPUT, fail
from treadle.files import read_regular_file

KEY_VARIABLE = "TREADLE_API_KEY"
MAX_KEY_FILE_BYTES = 64 * 1024


def key_from_file(path: Path | None) -> None:
    """Read the model key of ``--api-key-file`` into this process's ``TREADLE_API_KEY`` (the
    one place the edge reads it from); exit 2 for an unreadable or empty file."""
    if path is None:
        return
    try:
        text = read_regular_file(path, MAX_KEY_FILE_BYTES).decode("utf-8")
    except (OSError, ValueError) as error:
        fail(f"--api-key-file: cannot read {path}: {error}", EXIT_BAD_INPUT)
    keys = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if len(keys) != 1:
        fail(f"--api-key-file: {path} must hold one key on one line", EXIT_BAD_INPUT)
    os.environ[KEY_VARIABLE] = keys[0]


def check_model(model: str, base_url: str | None, api_key: str | None) -> None:
    """Exit 2 when LiteLLM cannot tell the provider of ``model`` (a misspelt name) or when the
    provider needs a key and none is given. A ``base_url`` (an OpenAI-compatible server of
    one's own) takes any name and may need no key, but must answer."""
    if base_url is not None:
        probe_base_url(base_url)
        return
    from treadle.runtime.llm.litellm_model import import_litellm

    litellm = import_litellm()

    try:
        _model, provider, _key, _base = litellm.get_llm_provider(model)
    except Exception:  # LiteLLM raises its BadRequestError (and others) for an unknown name
        fail(
            f"--model {model!r}: LiteLLM does not know this model or its provider; check the "
            "spelling, or name the provider as PROVIDER/MODEL (e.g. openai/gpt-4o-mini), or "
            "give --base-url for an OpenAI-compatible server",
            EXIT_BAD_INPUT,
        )
    if api_key:
        return
    needed = litellm.validate_environment(model)
    missing = [name for name in needed.get("missing_keys", ()) if name.endswith("_KEY")]
    if missing:
        fail(
            f"model {model!r} (provider {provider}) needs an API key: set {KEY_VARIABLE} or "
            "give --api-key-file FILE (never the key itself on the command line)",
            EXIT_BAD_INPUT,
        )


PROBE_TIMEOUT_S = 5.0
"""How long the base URL's server has to answer before a run is refused."""


def probe_base_url(base_url: str) -> None:
    """Exit 2 when nothing answers at ``base_url`` (refused, no such host, no answer within
    ``PROBE_TIMEOUT_S``): before a conversation is made or a model call paid for. Any HTTP
    answer (a 401, a 404 for ``/models``) means a server is there."""
    import httpx

    try:
        httpx.get(base_url.rstrip("/") + "/models", timeout=PROBE_TIMEOUT_S)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as error:
        reason = str(error) or type(error).__name__
        fail(
            f"--base-url {base_url} does not answer ({reason}): start the model's server, "
            "or check the URL",
            EXIT_BAD_INPUT,
        )
