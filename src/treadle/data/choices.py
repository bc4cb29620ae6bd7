"""The settings' plain choices (enums, no pydantic): what the command line offers as option
values without loading the settings models. ``treadle.data.settings`` uses and exports them."""

from __future__ import annotations

from enum import StrEnum


class ConfirmationPolicy(StrEnum):
    """Which proposed calls wait for the user: none, all, or those a risk analyzer flags."""

    NEVER = "never"
    ALWAYS = "always"
    RISKY = "risky"


class CondenseMode(StrEnum):
    """Whether the runtime condenses the model's context (``auto``) or never does (``off``)."""

    AUTO = "auto"
    OFF = "off"
