"""Finding and reading a workspace's skills: AGENTS.md, repo.md and the skill folders.

Every file is read under caps (size, count, total), never through a link out of the workspace;
a file that cannot be used is skipped with the reason, and the others still load.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from treadle.runtime.skills.front_matter import FrontMatterError, checked_name, split_front_matter
from treadle.runtime.workspace.confined import (
    ConfinedPathError,
    ConfinedRoot,
    NotARegularFile,
    PathChanged,
)

MAX_SKILL_FILE_BYTES = 64 * 1024
"""A skill file over this is not loaded (always-on text is sent with every request)."""
MAX_SKILLS_TOTAL_BYTES = 256 * 1024
"""All loaded skills together; files past it are skipped."""
MAX_FILES_PER_FOLDER = 200
"""Skill files looked at in one folder; more are skipped, said so once."""

ALWAYS_ON_FILES = (("AGENTS.md", "agents"), (".openhands/microagents/repo.md", "repo"))
"""Files always added to the system prompt (triggers in them are ignored), with their names."""
SKILL_FOLDERS = (".treadle/skills", ".openhands/skills", ".openhands/microagents", ".claude/skills")
"""Searched in this order; the first skill of a name wins. In each: ``*.md`` files (OpenHands)
and ``<name>/SKILL.md`` (Claude Code, Agent Skills)."""
SKILL_FILE = "SKILL.md"
_NOT_SKILLS = frozenset({"readme.md"})


@dataclass(frozen=True, slots=True)
class Skill:
    """One loaded skill. ``triggers`` empty: always on (in the system prompt)."""

    name: str
    source: str
    """The file, relative to the workspace root (POSIX separators)."""
    content: str
    triggers: tuple[str, ...] = ()
    description: str | None = None
    size: int = 0
    """The file's size in bytes."""

    @property
    def always_on(self) -> bool:
        return not self.triggers


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file that was not loaded, and why (a warning, not an error: the run goes on)."""

    source: str
    error: str

    def __str__(self) -> str:
        return f"{self.source}: {self.error}"


@dataclass(slots=True)
class LoadedSkills:
    """What a workspace's files give, in load order, and the files skipped."""

    skills: list[Skill] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


class _Refused(Exception):
    """A file that is not read: the reason is the message."""


def load_skills(workspace_root: str | Path) -> LoadedSkills:
    """The skills of the workspace at ``workspace_root`` (none when it does not exist)."""
    loaded = LoadedSkills()
    try:
        root = Path(workspace_root).resolve(strict=True)
    except OSError:
        return loaded
    if not root.is_dir():
        return loaded
    reader = _Reader(root, loaded)
    for relative, name in ALWAYS_ON_FILES:
        reader.read(root / relative, default_name=name, always_on=True)
    for folder in SKILL_FOLDERS:
        for path, default_name in reader.candidates(root / folder):
            reader.read(path, default_name=default_name, always_on=False)
    return loaded


class _Reader:
    def __init__(self, root: Path, loaded: LoadedSkills) -> None:
        self.root = root
        self.loaded = loaded
        self.total_bytes = 0
        self.names: set[str] = set()

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def skip(self, path: Path, error: str) -> None:
        self.loaded.skipped.append(Skipped(self.relative(path), error))

    def candidates(self, folder: Path) -> list[tuple[Path, str]]:
        """The skill files of ``folder`` with their default names, sorted (load order)."""
        try:
            self.inside(folder)
            if not folder.is_dir():
                return []
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except _Refused as refused:
            self.skip(folder, str(refused))
            return []
        except OSError as error:
            self.skip(folder, f"cannot be listed: {error.strerror or error}")
            return []
        found: list[tuple[Path, str]] = []
        for entry in entries:
            path = Path(entry.path)
            if entry.name.lower() in _NOT_SKILLS or path == self.root / ALWAYS_ON_FILES[1][0]:
                continue
            if entry.name.endswith(".md"):
                found.append((path, entry.name[: -len(".md")]))
            elif _is_dir(entry) and os.path.lexists(path / SKILL_FILE):
                found.append((path / SKILL_FILE, entry.name))
        if len(found) > MAX_FILES_PER_FOLDER:
            self.skip(
                folder,
                f"holds {len(found)} skill files, over the limit of {MAX_FILES_PER_FOLDER}: "
                f"those after {self.relative(found[MAX_FILES_PER_FOLDER - 1][0])} are not loaded",
            )
            found = found[:MAX_FILES_PER_FOLDER]
        return found

    def inside(self, path: Path) -> Path:
        """``path`` resolved; refused when it (or a folder on the way) is a link out of the
        workspace."""
        try:
            real = path.resolve(strict=False)
        except (OSError, RuntimeError):  # a link loop
            raise _Refused("is a link that cannot be followed (a loop?)") from None
        if real != self.root and not real.is_relative_to(self.root):
            raise _Refused(f"is a link out of the workspace (to {real}): refused")
        return real

    def read(self, path: Path, *, default_name: str, always_on: bool) -> None:
        if not os.path.lexists(path):
            return
        try:
            text, size = self._text(self.root, self.inside(path))
            parsed = split_front_matter(text)
            meta = parsed.front_matter
            name = meta.name if meta.name is not None else _name_from_file(default_name)
        except (_Refused, FrontMatterError) as problem:
            self.skip(path, str(problem))
            return
        if not parsed.body:
            self.skip(path, "has no text after its front matter: nothing to add")
            return
        if name in self.names:
            self.skip(path, f"another skill is already called {name!r}: not loaded")
            return
        content_bytes = len(parsed.body.encode())
        if self.total_bytes + content_bytes > MAX_SKILLS_TOTAL_BYTES:
            self.skip(
                path,
                f"the skills loaded so far and this one are over {MAX_SKILLS_TOTAL_BYTES} "
                "bytes in all: not loaded",
            )
            return
        self.total_bytes += content_bytes
        self.names.add(name)
        triggers = () if always_on else meta.triggers
        self.loaded.skills.append(
            Skill(name, self.relative(path), parsed.body, triggers, meta.description, size)
        )

    @staticmethod
    def _text(root: Path, real: Path) -> tuple[str, int]:
        """The text of the file at ``real`` (resolved, inside the workspace ``root``), opened
        below the workspace's descriptor (``ConfinedRoot``: a folder swapped for a link since
        the check cannot lead out) without blocking on a FIFO or device; at most
        MAX_SKILL_FILE_BYTES are read."""
        relative = PurePosixPath(real.relative_to(root).as_posix())
        try:
            with ConfinedRoot(root) as files:
                fd = files.open_regular(relative)
        except PathChanged:
            raise _Refused("is a link that changed while it was read: refused") from None
        except NotARegularFile:
            raise _Refused("is not a regular file: refused") from None
        except ConfinedPathError as error:
            raise _Refused(f"cannot be read: {error}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _Refused("is not a regular file: refused")
            if info.st_size > MAX_SKILL_FILE_BYTES:
                raise _Refused(
                    f"is {info.st_size} bytes, over the {MAX_SKILL_FILE_BYTES}-byte limit for "
                    "a skill file: not loaded"
                )
            chunks: list[bytes] = []
            left = MAX_SKILL_FILE_BYTES + 1
            while left > 0 and (chunk := os.read(fd, left)):
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
        finally:
            os.close(fd)
        if len(data) > MAX_SKILL_FILE_BYTES:  # it grew since fstat
            raise _Refused(f"is over the {MAX_SKILL_FILE_BYTES}-byte limit for a skill file")
        if b"\x00" in data:
            raise _Refused("holds NUL bytes: not a text file")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise _Refused(f"is not UTF-8 text (byte {error.start})") from None
        return text, len(data)


def _name_from_file(default_name: str) -> str:
    """The name of a skill whose front matter gives none: its file's (or folder's) name."""
    try:
        return checked_name(default_name, 1)
    except FrontMatterError as error:
        raise _Refused(f"has no 'name' and its file name cannot be one ({error.message})") from None


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
