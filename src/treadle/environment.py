"""This process's environment, read at the edges (the CLI, the server's ``create_app``) and
handed to the runtime as values: the runtime itself never reads ``os.environ``."""

from __future__ import annotations

import os
from collections.abc import Mapping

from treadle.runtime.conversation import MODEL_KEY_NAME
from treadle.runtime.llm.litellm_model import DEADLINE_ENV, ModelEnvironment

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
