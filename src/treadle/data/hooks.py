"""Hook settings as data, in Claude Code's ``hooks`` shape (event -> matchers -> commands):
what a settings file, a client or a stored conversation holds. Run by ``treadle.runtime.hooks``.
"""

from __future__ import annotations

from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

HookEventName = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop"]
HOOK_EVENTS: tuple[HookEventName, ...] = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop")
"""The hook events Treadle runs (Claude Code has more; a file naming another is refused)."""

TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse"})
"""The events whose matcher is tested against a tool name (the others match everything)."""

DEFAULT_HOOK_TIMEOUT_S = 60.0
MAX_HOOK_TIMEOUT_S = 3600.0

MAX_MATCHER_LENGTH = 1000
MATCH_TIMEOUT_S = 0.05
"""How long one matcher may take on one tool name. A matcher is a client's regular expression
and a tool name may be the model's: a pattern like ``(a|aa)*b`` backtracks for ages (and would
hold a server's interpreter while it does). One that runs out of time counts as a match: its
hook runs (a guard is not skipped by making it slow)."""
MAX_TOOL_NAME_LENGTH = 64
"""Providers' limit on a tool's name: a longer name a model makes up is matched only by an
empty or ``*`` matcher."""

TOOL_NAME_ALIASES: dict[str, tuple[str, ...]] = {"terminal": ("Bash",)}
"""Claude Code's names of Treadle's tools, so that a ``Bash`` matcher of a settings file users
already have fires for ``terminal`` (whose ``command`` argument is Bash's ``command`` too)."""


class HookCommand(BaseModel):
    """One command a hook runs: it gets the event as JSON on stdin."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["command"] = "command"
    command: str = Field(min_length=1, description="A shell command line (run by /bin/sh -c)")
    timeout: float = Field(
        default=DEFAULT_HOOK_TIMEOUT_S,
        gt=0,
        le=MAX_HOOK_TIMEOUT_S,
        description="Seconds before the hook and every process it started are killed",
    )
    on_failure: Literal["block", "allow"] = Field(
        default="block",
        description="What a hook that crashes, exits with a code other than 0 or 2, or times "
        "out decides: `block` (the default: fail closed) or `allow` (as Claude Code does)",
    )

    @field_validator("command")
    @classmethod
    def _no_nul(cls, command: str) -> str:
        if "\0" in command:
            raise ValueError("a hook command cannot hold a NUL byte")
        return command


class HookMatcher(BaseModel):
    """Commands run for the tool names ``matcher`` matches (a regular expression matched
    against the whole name, as Claude Code does; empty or ``*``: every tool)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    matcher: str = Field(default="", max_length=MAX_MATCHER_LENGTH)
    hooks: tuple[HookCommand, ...] = Field(min_length=1)

    @field_validator("matcher")
    @classmethod
    def _a_regular_expression(cls, matcher: str) -> str:
        if matcher not in ("", "*"):
            try:
                regex.compile(matcher)
            except regex.error as error:
                raise ValueError(
                    f"matcher {matcher!r} is not a regular expression: {error}"
                ) from None
        return matcher

    def matches(self, tool_name: str | None) -> bool:
        if self.matcher in ("", "*") or tool_name is None:
            return True
        if len(tool_name) > MAX_TOOL_NAME_LENGTH:
            return False  # no tool has such a name (providers' limit): not worth a regex's time
        names = (tool_name, *TOOL_NAME_ALIASES.get(tool_name, ()))
        return any(_fullmatch(self.matcher, name) for name in names)


def _fullmatch(matcher: str, name: str) -> bool:
    """Whether ``matcher`` matches the whole of ``name``; True when it runs out of its
    ``MATCH_TIMEOUT_S`` (``regex``, unlike ``re``, can stop a match that takes too long)."""
    try:
        return regex.fullmatch(matcher, name, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError:
        return True


class HookSettings(BaseModel):
    """Claude Code's ``hooks`` object: for each event, its matchers."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    PreToolUse: tuple[HookMatcher, ...] = ()
    PostToolUse: tuple[HookMatcher, ...] = ()
    UserPromptSubmit: tuple[HookMatcher, ...] = ()
    Stop: tuple[HookMatcher, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _known_events(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = [name for name in value if name not in HOOK_EVENTS]
            if unknown:
                raise ValueError(
                    f"hook event(s) {', '.join(map(repr, unknown))} are not run by Treadle; it "
                    f"runs {', '.join(HOOK_EVENTS)} (remove the others from the file)"
                )
        return value

    def commands(self, event: HookEventName, tool_name: str | None = None) -> list[HookCommand]:
        """The commands ``event`` runs for ``tool_name``, in file order, each once."""
        found: list[HookCommand] = []
        for matcher in getattr(self, event):
            if event in TOOL_EVENTS and not matcher.matches(tool_name):
                continue
            found.extend(command for command in matcher.hooks if command not in found)
        return found

    @property
    def empty(self) -> bool:
        return not any(getattr(self, event) for event in HOOK_EVENTS)

    @classmethod
    def from_file_data(cls, data: Any) -> HookSettings:
        """The hooks of a settings file's JSON: its ``hooks`` object (a Claude Code
        ``settings.json``, whose other keys are not Treadle's and are left alone), or the file
        itself when it is only that object."""
        if isinstance(data, dict) and "hooks" in data:
            data = data["hooks"]
        return cls.model_validate(data)

    def merged(self, other: HookSettings) -> HookSettings:
        """These hooks, then ``other``'s, for each event."""
        return HookSettings.model_validate(
            {event: (*getattr(self, event), *getattr(other, event)) for event in HOOK_EVENTS}
        )
