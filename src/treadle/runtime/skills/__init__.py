"""Workspace skills: AGENTS.md and skill files loaded into the model's context (docs/skills.md).

``loading`` finds and reads the files, ``front_matter`` parses them, ``activation`` puts them on
the events the model is sent.
"""

from treadle.runtime.skills.activation import SKILLS_KEY, WorkspaceSkills, active_skills
from treadle.runtime.skills.front_matter import FrontMatterError, split_front_matter
from treadle.runtime.skills.loading import (
    MAX_SKILL_FILE_BYTES,
    MAX_SKILLS_TOTAL_BYTES,
    LoadedSkills,
    Skill,
    Skipped,
    load_skills,
)

__all__ = [
    "MAX_SKILLS_TOTAL_BYTES",
    "MAX_SKILL_FILE_BYTES",
    "SKILLS_KEY",
    "FrontMatterError",
    "LoadedSkills",
    "Skill",
    "Skipped",
    "WorkspaceSkills",
    "active_skills",
    "load_skills",
    "split_front_matter",
]
