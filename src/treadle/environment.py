"""This process's environment, read at the edges (the CLI, the server's ``create_app``) and
handed to the runtime as values: the runtime itself never reads ``os.environ``."""

from __future__ import annotations

import os
from collections.abc import Mapping

from treadle.runtime.llm.provider import DEADLINE_ENV, ModelEnvironment
from treadle.runtime.parts import MODEL_KEY_NAME
from treadle.runtime.workspace.shell import SHELL_ENV_NAMES

MODEL_ENV = "TREADLE_MODEL"
BASE_URL_ENV = "TREADLE_BASE_URL"


def model_environment(environ: Mapping[str, str] | None = None) -> ModelEnvironment:
    """The model's defaults, operator base URL, key and deadline from ``environ`` (default:
    ``os.environ``); unset and empty variables are None."""
    env = os.environ if environ is None else environ
    return ModelEnvironment(
        model=env.get(MODEL_ENV) or None,
        base_url=env.get(BASE_URL_ENV) or None,
        api_key=env.get(MODEL_KEY_NAME) or None,
        deadline=env.get(DEADLINE_ENV) or None,
    )


def shell_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What an unsandboxed shell may take from ``environ`` (default: ``os.environ``): PATH,
    HOME, locale and the like (``SHELL_ENV_NAMES``), never a key. A sandbox uses its own."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in SHELL_ENV_NAMES if name in env}
