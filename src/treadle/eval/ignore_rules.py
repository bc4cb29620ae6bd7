"""The starting files' own ignore rules as one exclude file: every ``.gitignore`` among the
starting files, rewritten relative to the workspace's root, so that the patch can be taken
with these rules only and never with an ignore file the agent wrote (``*`` in a folder the
agent made would otherwise hide its fix from the patch).

git reads the per-folder ``.gitignore`` files of the work tree it is given; an exclude file
(``--exclude-from``) holds rules for the whole tree, later lines winning. A rule of
``D/.gitignore`` with no slash but a trailing one matches at any depth below ``D``
(``D/**/rule``); one with a slash is anchored at ``D`` (``D/rule``). Deeper files come later
since they take precedence over shallower ones, as in git.
"""

from __future__ import annotations

GLOB_CHARACTERS = "\\*?["


def exclude_lines(path: str, text: str) -> list[str]:
    """The rules of the ignore file at ``path`` (relative to the root: ``.gitignore`` or
    ``D/.gitignore``) as root-relative exclude lines."""
    folder = path.rpartition("/")[0]
    prefix = "".join("\\" + ch if ch in GLOB_CHARACTERS else ch for ch in folder)
    lines = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        if not prefix:
            lines.append(line)
            continue
        negated = line.startswith("!")
        rule = line[1:] if negated else line
        body = rule.rstrip("/") if not rule.endswith("\\/") else rule
        suffix = rule[len(body) :]
        if not body:
            continue
        rewritten = f"{prefix}/{body.lstrip('/')}" if "/" in body else f"{prefix}/**/{body}"
        lines.append(("!" if negated else "") + rewritten + suffix)
    return lines


def exclude_file_text(ignore_files: dict[str, str]) -> str:
    """One exclude file from the ignore files found among the starting files (path relative
    to the root -> text), shallower files first so that deeper ones win."""
    ordered = sorted(ignore_files, key=lambda name: (name.count("/"), name))
    lines: list[str] = []
    for name in ordered:
        lines += exclude_lines(name, ignore_files[name])
    return "".join(line + "\n" for line in lines)
