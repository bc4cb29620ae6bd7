"""A skill file's YAML front matter: split from the body, parsed safely, its fields checked.

Errors name the line (1-based, counted in the whole file) so a user can find the fault.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

import yaml

FENCE = "---"
MAX_NAME_CHARS = 100
MAX_TRIGGER_CHARS = 100
MAX_TRIGGERS = 100

_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it (~10x faster), else the pure Python one."""


class FrontMatterError(ValueError):
    """A front matter that cannot be read; ``line`` is where in the file (1-based)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """The fields Treadle reads (others, e.g. Claude Code's ``allowed-tools``, are ignored)."""

    name: str | None = None
    description: str | None = None
    triggers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SkillText:
    """A skill file split: its front matter and its body (the text the model is given)."""

    front_matter: FrontMatter
    body: str


def split_front_matter(text: str) -> SkillText:
    """``text`` (a whole file) as front matter and body; no front matter when the first line
    is not ``---``. Raises FrontMatterError for a fence never closed, bad YAML or bad fields."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != FENCE:
        return SkillText(FrontMatter(), text.strip())
    for index in range(1, len(lines)):
        if lines[index].rstrip() in (FENCE, "..."):
            yaml_text = "".join(lines[1:index])
            body = "".join(lines[index + 1 :])
            return SkillText(_front_matter(yaml_text, first_line=2), body.strip())
    raise FrontMatterError(1, "the front matter opened here is never closed by a '---' line")


def _front_matter(yaml_text: str, first_line: int) -> FrontMatter:
    loader = _SAFE_LOADER(yaml_text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = first_line + (mark.line if mark is not None else 0)
        raise FrontMatterError(line, f"bad YAML: {error.problem or error}") from None
    except yaml.YAMLError as error:
        raise FrontMatterError(first_line, f"bad YAML: {error}") from None
    finally:
        loader.dispose()
    if data is None:
        return FrontMatter()
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise FrontMatterError(first_line, "the front matter should be a mapping of fields")
    key_lines = {
        key.value: first_line + key.start_mark.line
        for key, _ in node.value
        if isinstance(key, yaml.ScalarNode)
    }

    def line_of(key: str) -> int:
        return key_lines.get(key, first_line)

    name = _optional_text(data, "name", line_of("name"))
    if name is not None:
        name = checked_name(name, line_of("name"))
    description = _optional_text(data, "description", line_of("description"))
    return FrontMatter(name, description, _triggers(data.get("triggers"), line_of("triggers")))


def _optional_text(data: dict[str, Any], key: str, line: int) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FrontMatterError(line, f"'{key}' should be text, got {type(value).__name__}")
    return value.strip()


def _shown(value: Any) -> str:
    """``value`` for an error message: text cut short, anything else by its type only. Never
    its repr: YAML aliases can nest a few lines into a billion-element structure (shared, so
    cheap to hold) whose repr would never end."""
    if isinstance(value, str):
        return repr(value[:60] + ("..." if len(value) > 60 else ""))
    if isinstance(value, int | float | bool) or value is None:
        return repr(value)
    return f"a {type(value).__name__}"


def checked_name(name: str, line: int) -> str:
    """A skill name: 1 to MAX_NAME_CHARS printable characters (it is recorded and shown)."""
    name = name.strip()
    if not name:
        raise FrontMatterError(line, "'name' is empty")
    if len(name) > MAX_NAME_CHARS:
        raise FrontMatterError(line, f"'name' is over {MAX_NAME_CHARS} characters")
    if not _printable(name):
        raise FrontMatterError(line, f"'name' {name!r} holds control or invisible characters")
    return name


def _triggers(value: Any, line: int) -> tuple[str, ...]:
    """``triggers``: a list of words (a single word is accepted as a list of one)."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise FrontMatterError(line, f"'triggers' should be a list of words, got {_shown(value)}")
    if len(items) > MAX_TRIGGERS:
        raise FrontMatterError(line, f"'triggers' has over {MAX_TRIGGERS} items")
    triggers: list[str] = []
    for item in items:
        if not isinstance(item, str | int | float) or isinstance(item, bool):
            raise FrontMatterError(line, f"trigger {_shown(item)} is not a word")
        word = str(item).strip()
        if not word:
            raise FrontMatterError(line, "a trigger is empty")
        if len(word) > MAX_TRIGGER_CHARS or not _printable(word):
            raise FrontMatterError(
                line,
                f"trigger {word!r:.60} is over {MAX_TRIGGER_CHARS} characters or holds "
                "control characters",
            )
        if word.casefold() not in (seen.casefold() for seen in triggers):
            triggers.append(word)
    return tuple(triggers)


def _printable(text: str) -> bool:
    """No control, format (e.g. bidi overrides) or unassigned characters; spaces are fine."""
    return all(unicodedata.category(char)[0] != "C" for char in text)
