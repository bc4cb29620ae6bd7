"""Where loaded skills reach the model: the system prompt's context, and the user messages
whose words trigger a skill (recorded on the events, so the log alone reproduces them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treadle.events.fact_keys import SKILLS_KEY as SKILLS_KEY
from treadle.events.model import EventBase, MessageEvent, SystemPromptEvent
from treadle.runtime.skills.loading import LoadedSkills, Skill, load_skills

CONTEXT_HEADER = "The workspace gives these instructions (its AGENTS.md and always-on skills):"

_log = logging.getLogger(__name__)


def mentions(text: str, trigger: str) -> bool:
    """Whether ``text`` holds ``trigger`` as a whole word or phrase, in any case (Unicode
    case folding): not inside a longer word, whatever characters the trigger holds."""
    return _mentions(text.casefold(), trigger.casefold())


def _mentions(folded_text: str, folded_trigger: str) -> bool:
    # str.find and two neighbour checks: ~100x faster than a regex per trigger, which matters
    # with hundreds of skills and long messages.
    size = len(folded_trigger)
    start = folded_text.find(folded_trigger)
    while start >= 0:
        end = start + size
        if (start == 0 or not _is_word(folded_text[start - 1])) and (
            end == len(folded_text) or not _is_word(folded_text[end])
        ):
            return True
        start = folded_text.find(folded_trigger, start + 1)
    return False


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


@dataclass(frozen=True, slots=True)
class _Triggered:
    skill: Skill
    folded: tuple[tuple[str, str], ...]
    """Each trigger as written, and case-folded."""

    def first_match(self, folded_text: str) -> str | None:
        for trigger, folded in self.folded:
            if _mentions(folded_text, folded):
                return trigger
        return None


class WorkspaceSkills:
    """A workspace's skills as loaded once per process; what they add is put on the events
    (``SystemPromptEvent.context``, ``MessageEvent.extended_content``), never re-read later."""

    def __init__(self, loaded: LoadedSkills) -> None:
        self.loaded = loaded
        self.always_on = [skill for skill in loaded.skills if skill.always_on]
        self._triggered = [
            _Triggered(skill, tuple((word, word.casefold()) for word in skill.triggers))
            for skill in loaded.skills
            if not skill.always_on
        ]

    @classmethod
    def load(cls, workspace_root: str | Path) -> WorkspaceSkills:
        """The skills of ``workspace_root``; each file skipped is logged as a warning."""
        skills = cls(load_skills(workspace_root))
        for skipped in skills.loaded.skipped:
            _log.warning("skill file skipped: %s", skipped)
        return skills

    # -- the system prompt -------------------------------------------------------------------

    def added_to_system_prompt(self, event: SystemPromptEvent) -> SystemPromptEvent:
        """``event`` with the always-on skills' text as its ``context`` (unchanged if none)."""
        if not self.always_on:
            return event
        framed = "\n\n".join(_framed(skill) for skill in self.always_on)
        context = f"{CONTEXT_HEADER}\n\n{framed}"
        names = tuple(skill.name for skill in self.always_on)
        return event.model_copy(update={"context": context, "skills": names})

    def fact(self) -> dict[str, Any] | None:
        """The ``skills`` fact recorded when the conversation starts; None when the
        workspace has no skill files at all."""
        if not self.loaded.skills and not self.loaded.skipped:
            return None
        return {
            "loaded": [
                {
                    "name": skill.name,
                    "source": skill.source,
                    "triggers": list(skill.triggers),
                    "bytes": skill.size,
                }
                for skill in self.loaded.skills
            ],
            "skipped": [
                {"source": skipped.source, "error": skipped.error}
                for skipped in self.loaded.skipped
            ],
        }

    # -- user messages -----------------------------------------------------------------------

    def added_to_message(self, message: MessageEvent, path: Sequence[EventBase]) -> MessageEvent:
        """``message`` (a user message about to follow ``path``) with the skills its text
        triggers that are not active on ``path`` yet, each added once per branch."""
        if not self._triggered or message.role != "user":
            return message
        active = active_skills(path)
        names: list[str] = []
        texts: list[str] = []
        folded_text = message.text.casefold()
        for triggered in self._triggered:
            skill = triggered.skill
            if skill.name in active:
                continue
            trigger = triggered.first_match(folded_text)
            if trigger is not None:
                names.append(skill.name)
                texts.append(_framed(skill, trigger))
        if not names:
            return message
        return message.model_copy(
            update={
                "activated_skills": (*message.activated_skills, *names),
                "extended_content": (*message.extended_content, *texts),
            }
        )


def active_skills(path: Iterable[EventBase]) -> set[str]:
    """Skills already given to the model on ``path``: on its system prompt or its messages."""
    active: set[str] = set()
    for event in path:
        if isinstance(event, MessageEvent):
            active.update(event.activated_skills)
        elif isinstance(event, SystemPromptEvent):
            active.update(event.skills)
    return active


def _framed(skill: Skill, trigger: str | None = None) -> str:
    """A skill's text as the model gets it, saying where it comes from (and why, if
    triggered) so the model can weigh it."""
    why = "" if trigger is None else f' trigger="{_attribute(trigger)}"'
    head = f'<skill name="{_attribute(skill.name)}" source="{_attribute(skill.source)}"{why}>'
    note = (
        ""
        if trigger is None
        else f"Added because the message mentions {trigger!r}; it may or may not apply.\n\n"
    )
    return f"{head}\n{note}{skill.content}\n</skill>"


def _attribute(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
