"""``treadle bench skills``: what workspace skills cost a conversation: loading them when it is
opened (an empty workspace, and one with N skill files) and matching a message's words.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from treadle.bench.core import best_of
from treadle.events.model import MessageEvent
from treadle.runtime.skills import WorkspaceSkills

MESSAGE_WORDS = 300
"""Words of the user message matched against every trigger (about 2 kB)."""


def run_skills_bench(skills: int = 200, repeats: int = 10) -> dict[str, Any]:
    """Load times (best of ``repeats``) and the time to match one message against them all."""
    with tempfile.TemporaryDirectory(prefix="treadle-bench-skills-") as folder:
        root = Path(folder)
        empty = root / "empty"
        empty.mkdir()
        full = _workspace(root / "full", skills)
        empty_s = best_of(repeats, lambda: WorkspaceSkills.load(empty))
        load_s = best_of(repeats, lambda: WorkspaceSkills.load(full))
        loaded = WorkspaceSkills.load(full)
    words = " ".join(f"word{index % 997}" for index in range(MESSAGE_WORDS))
    message = MessageEvent(source="user", text=f"{words} trigger{skills // 2}")
    match_s = best_of(repeats * 5, lambda: loaded.added_to_message(message, ()))
    activated = loaded.added_to_message(message, ()).activated_skills
    assert activated == (f"skill{skills // 2}",), activated  # the bench measures a real match
    return {
        "skill_files": skills,
        "load_empty_workspace_s": empty_s,
        "load_s": load_s,
        "load_per_file_s": load_s / (skills + 1),
        "message_chars": len(message.text),
        "match_s": match_s,
    }


def _workspace(root: Path, skills: int) -> Path:
    folder = root / ".openhands" / "skills"
    folder.mkdir(parents=True)
    (root / "AGENTS.md").write_text("# Rules\n\nRun the tests before you finish.\n")
    for index in range(skills):
        (folder / f"skill{index}.md").write_text(
            f"---\nname: skill{index}\ndescription: Skill {index}\n"
            f"triggers: [trigger{index}, other-{index}]\n---\n\nWhat to do for {index}.\n"
        )
    return root
