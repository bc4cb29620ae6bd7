"""Skills as a run extension: the always-on skills on the system prompt (and the ``skills``
fact of what was loaded), the skills a user message triggers on that message
(docs/skills.md)."""

from __future__ import annotations

from treadle.events.model import MessageEvent, SystemPromptEvent
from treadle.runtime.extensions.base import RunExtension, RunScope
from treadle.runtime.skills import SKILLS_KEY, WorkspaceSkills


class SkillsExtension(RunExtension):
    def __init__(self, skills: WorkspaceSkills) -> None:
        self.skills = skills

    def system_prompt(self, scope: RunScope, event: SystemPromptEvent) -> SystemPromptEvent:
        return self.skills.added_to_system_prompt(event)

    def conversation_started(self, scope: RunScope) -> None:
        fact = self.skills.fact()
        if fact is not None:
            scope.log.record_fact(SKILLS_KEY, fact)

    def shape_message(self, scope: RunScope, message: MessageEvent) -> MessageEvent:
        return self.skills.added_to_message(message, scope.log.path())
