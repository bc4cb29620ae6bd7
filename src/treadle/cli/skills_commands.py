"""``treadle skills WORKSPACE``: what a conversation in that workspace would load (AGENTS.md,
always-on and triggered skills) and the files it would skip, with why. Exit 0, or 2 (bad input).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from treadle.cli.output import fail, print_json
from treadle.cli.root import app

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from treadle.runtime.skills import LoadedSkills


@app.command("skills")
def skills_command(
    workspace: Annotated[Path, typer.Argument(help="The workspace folder (its root)")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
) -> None:
    """List the skills a conversation in WORKSPACE would load (docs/skills.md)."""
    from treadle.runtime.skills import load_skills

    if not workspace.is_dir():
        fail(f"workspace {str(workspace)!r} is not a folder")
    loaded = load_skills(workspace)
    if as_json:
        print_json(_as_json(loaded))
        return
    _print_table(loaded)


def _as_json(loaded: LoadedSkills) -> dict[str, object]:
    return {
        "skills": [
            {
                "name": skill.name,
                "source": skill.source,
                "always_on": skill.always_on,
                "triggers": list(skill.triggers),
                "description": skill.description,
                "bytes": skill.size,
            }
            for skill in loaded.skills
        ],
        "skipped": [
            {"source": skipped.source, "error": skipped.error} for skipped in loaded.skipped
        ],
    }


def _print_table(loaded: LoadedSkills) -> None:
    out = Console(highlight=False)
    if not loaded.skills:
        out.print("no skills: the workspace has no AGENTS.md and no skill files")
    else:
        table = Table("name", "source", "loads", "bytes")
        for skill in loaded.skills:
            loads = "always (system prompt)" if skill.always_on else ", ".join(skill.triggers)
            table.add_row(escape(skill.name), escape(skill.source), escape(loads), str(skill.size))
        out.print(table)
    err = Console(stderr=True, highlight=False)
    for skipped in loaded.skipped:
        err.print(f"warning: skipped {escape(str(skipped))}")
