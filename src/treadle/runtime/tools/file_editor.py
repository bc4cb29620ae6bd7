"""The ``file_editor`` tool: view (numbered lines, folders), create, str_replace (one exact match),
insert after a line, and undo_edit, on regular text files inside the workspace only.

It runs in Treadle's own process, so every file operation goes through
``workspace.confined.ConfinedRoot``: a path is checked (``Workspace.resolve``) and then opened
below the workspace folder's descriptor with no symlink followed, so a folder swapped for a link
in between cannot lead out; a FIFO, socket or device is refused at once."""

from __future__ import annotations

import stat
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import Field, model_validator

from treadle.runtime.tools.base import Tool, ToolArguments, ToolContext, ToolResult
from treadle.runtime.workspace.base import Workspace, WorkspacePathError
from treadle.runtime.workspace.confined import ConfinedRoot

MAX_FILE_BYTES = 5_000_000
"""Larger files are refused: reading them into the model's context would not help anyway."""

MAX_VIEW_CHARS = 30_000
MAX_DIRECTORY_ENTRIES = 300
MAX_UNDO_STEPS = 20
SNIPPET_CONTEXT = 4
"""Lines shown around an edit, so the model can check it without viewing the file again."""

Command = Literal["view", "create", "str_replace", "insert", "undo_edit"]

_DESCRIPTION = """\
View, create and edit text files in the workspace.
* `view` shows a file with line numbers (`view_range: [start, end]`, 1-based, end -1 = to the end), \
or lists a folder two levels deep (hidden items skipped).
* `create` writes `file_text` to a new file (parent folders are created); it refuses an existing \
file unless `overwrite` is true.
* `str_replace` replaces `old_str` with `new_str` (empty or omitted: delete). `old_str` must match \
exactly one place, whitespace and indentation included; add surrounding lines to make it unique.
* `insert` inserts `new_str` after line `insert_line` (0 = at the top).
* `undo_edit` reverts the last create, str_replace or insert on that file.
Paths are relative to the workspace folder (absolute paths must lie inside it)."""

_REQUIRED: dict[str, tuple[str, ...]] = {
    "create": ("file_text",),
    "str_replace": ("old_str",),
    "insert": ("insert_line", "new_str"),
}


class FileEditorArguments(ToolArguments):
    command: Command = Field(description="One of view, create, str_replace, insert, undo_edit.")
    path: str = Field(description="File or folder, relative to the workspace folder.")
    file_text: str | None = Field(default=None, description="create: the whole file content.")
    old_str: str | None = Field(default=None, description="str_replace: the exact text to replace.")
    new_str: str | None = Field(
        default=None, description="str_replace: the replacement; insert: the text to insert."
    )
    insert_line: int | None = Field(
        default=None, ge=0, description="insert: the line after which to insert (0 = top)."
    )
    view_range: list[int] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="view: [start, end] lines, 1-based and inclusive; end -1 reads to the end.",
    )
    overwrite: bool = Field(default=False, description="create: replace an existing file.")

    @model_validator(mode="after")
    def _has_what_the_command_needs(self) -> FileEditorArguments:
        missing = [name for name in _REQUIRED.get(self.command, ()) if getattr(self, name) is None]
        if missing:
            raise ValueError(f"command {self.command} needs {' and '.join(missing)}")
        if self.view_range is not None and self.command != "view":
            raise ValueError(f"view_range applies to view only, not to {self.command}")
        return self


class FileEditorTool(Tool[FileEditorArguments]):
    name = "file_editor"
    description = _DESCRIPTION
    arguments_model = FileEditorArguments
    # Safe in parallel: one lock makes every command atomic (two edits of one file in a batch
    # apply one after the other, each checking its own unique match).
    parallel_safe = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._history: dict[tuple[str, Path], list[str | None]] = {}

    def risky(self, arguments: FileEditorArguments) -> bool:
        return arguments.command != "view"

    def run(self, arguments: FileEditorArguments, context: ToolContext) -> ToolResult:
        path = context.workspace.resolve(arguments.path)
        shown = context.workspace.display(path)
        key = (context.conversation_id, path)
        root = context.workspace.root
        # The check above resolved every symlink; from here each step is confined by the
        # kernel (openat2 below the workspace folder, no symlink followed), so a folder
        # swapped for a link since the check is refused, never followed out.
        target = _File(shown, PurePosixPath(path.relative_to(root).as_posix()))
        with self._lock, ConfinedRoot(root) as files:
            if arguments.command == "view":
                content = _view(files, target, arguments.view_range, context.workspace)
            elif arguments.command == "create":
                content = self._create(key, files, target, arguments)
            elif arguments.command == "str_replace":
                content = self._str_replace(key, files, target, arguments)
            elif arguments.command == "insert":
                content = self._insert(key, files, target, arguments)
            else:
                content = self._undo(key, files, target)
        return ToolResult(content=content, data={"command": arguments.command, "path": shown})

    def _remember(self, key: tuple[str, Path], previous: str | None) -> None:
        steps = self._history.setdefault(key, [])
        steps.append(previous)
        del steps[:-MAX_UNDO_STEPS]

    def _create(
        self,
        key: tuple[str, Path],
        files: ConfinedRoot,
        target: _File,
        arguments: FileEditorArguments,
    ) -> str:
        shown = target.shown
        text = arguments.file_text or ""
        previous: str | None = None
        info = files.lstat(target.path)
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise ValueError(f"{shown} is a folder: give a file path to create")
        if info is not None:
            if not arguments.overwrite:
                raise ValueError(
                    f"{shown} already exists: edit it with str_replace or insert, "
                    "or set overwrite: true to replace its whole content"
                )
            previous = _read_text(files, target)
        files.mkdirs(target.path.parent)
        # A new file only when none was there (a file appearing meanwhile is refused).
        files.write(target.path, text.encode("utf-8"), exclusive=previous is None)
        self._remember(key, previous)
        verb = "Overwrote" if previous is not None else "Created"
        return f"{verb} {shown} ({len(_split_lines(text))} lines)."

    def _str_replace(
        self,
        key: tuple[str, Path],
        files: ConfinedRoot,
        target: _File,
        arguments: FileEditorArguments,
    ) -> str:
        shown = target.shown
        old, new = arguments.old_str or "", arguments.new_str or ""
        if not old:
            raise ValueError("old_str is empty: give the exact text to replace (or use insert)")
        text = _read_text(files, target)
        starts = _occurrences(text, old)
        if not starts:
            raise ValueError(
                f"No replacement made: old_str was found 0 times in {shown}. It must match "
                "exactly, whitespace and indentation included; view the file and copy the text."
            )
        if len(starts) > 1:
            lines = ", ".join(str(_line_of(text, start)) for start in starts)
            raise ValueError(
                f"No replacement made: old_str was found {len(starts)} times in {shown} "
                f"(starting at lines {lines}); include more surrounding lines to make it unique."
            )
        start = starts[0]
        if old == new:
            raise ValueError("old_str and new_str are the same: nothing would change")
        updated = text[:start] + new + text[start + len(old) :]
        files.write(target.path, updated.encode("utf-8"), create=False)
        self._remember(key, text)
        first = _line_of(updated, start)
        return _edited(shown, updated, first, first + new.count("\n"))

    def _insert(
        self,
        key: tuple[str, Path],
        files: ConfinedRoot,
        target: _File,
        arguments: FileEditorArguments,
    ) -> str:
        shown = target.shown
        after = arguments.insert_line or 0
        text = _read_text(files, target)
        lines = _split_lines(text)
        if after > len(lines):
            raise ValueError(
                f"insert_line {after} is past the end of {shown}, which has {len(lines)} lines: "
                f"use a number from 0 (top) to {len(lines)}"
            )
        block = arguments.new_str or ""
        if not block.endswith("\n"):
            block += "\n"
        if after == len(lines) and lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        updated = "".join([*lines[:after], block, *lines[after:]])
        files.write(target.path, updated.encode("utf-8"), create=False)
        self._remember(key, text)
        return _edited(shown, updated, after + 1, after + block.count("\n"))

    def _undo(self, key: tuple[str, Path], files: ConfinedRoot, target: _File) -> str:
        shown = target.shown
        steps = self._history.get(key)
        if not steps:
            raise ValueError(f"no edit of {shown} to undo (in this conversation and process)")
        previous = steps.pop()
        if previous is None:
            files.unlink(target.path)
            return f"Undid the creation of {shown}: the file was removed."
        files.write(target.path, previous.encode("utf-8"))
        return f"Undid the last edit of {shown}; it has {len(_split_lines(previous))} lines again."


@dataclass(frozen=True)
class _File:
    shown: str
    """How the model sees the path."""
    path: PurePosixPath
    """Its real path relative to the workspace folder."""


def _view(
    files: ConfinedRoot, target: _File, view_range: list[int] | None, workspace: Workspace
) -> str:
    shown = target.shown
    info = files.lstat(target.path)
    if info is None:
        raise ValueError(f"{shown} does not exist: check the path (view '.' lists the workspace)")
    if stat.S_ISDIR(info.st_mode):
        if view_range is not None:
            raise ValueError(f"{shown} is a folder: view_range applies to files only")
        return _list_folder(files, target, workspace)
    lines = _split_lines(_read_text(files, target))
    if not lines:
        return f"{shown} is empty."
    first, last = 1, len(lines)
    if view_range is not None:
        first, last = view_range
        if not 1 <= first <= len(lines):
            raise ValueError(
                f"view_range start {first} is outside {shown}, which has {len(lines)} lines"
            )
        if last == -1 or last > len(lines):
            last = len(lines)
        elif last < first:
            raise ValueError(
                f"view_range end {last} is before its start {first}; use -1 for the end"
            )
    numbered: list[str] = []
    size = 0
    for number in range(first, last + 1):
        row = f"{number:6}\t{lines[number - 1].removesuffix(chr(10))}"
        size += len(row) + 1
        if size > MAX_VIEW_CHARS and numbered:
            last = number - 1
            numbered.append(
                f"[... output stops at line {last} of {len(lines)} to stay short; "
                f"use view_range [{number}, -1] to read on]"
            )
            break
        numbered.append(row)
    return f"{shown}, lines {first}-{last} of {len(lines)}:\n" + "\n".join(numbered)


def _list_folder(files: ConfinedRoot, target: _File, workspace: Workspace) -> str:
    entries: list[str] = []
    omitted = 0
    for name, kind, real in _visible_children(files, target.path, workspace):
        nested = (
            [
                (f"{name}/{child}", child_kind)
                for child, child_kind, _real in _visible_children(files, real, workspace)
            ]
            if kind == "dir" and real is not None
            else []
        )
        for shown, shown_kind in [(name, kind), *nested]:
            if len(entries) >= MAX_DIRECTORY_ENTRIES:
                omitted += 1
                continue
            if shown_kind == "outside":
                entries.append(f"{shown}@ (a symlink leading outside the workspace: not followed)")
            else:
                entries.append(shown + "/" if shown_kind == "dir" else shown)
    header = f"Files and folders in {target.shown} (two levels deep, hidden items skipped):"
    if not entries:
        return f"{header}\n(empty)"
    footer = f"\n[... {omitted} more entries not shown]" if omitted else ""
    return header + "\n" + "\n".join(entries) + footer


def _visible_children(
    files: ConfinedRoot, folder: PurePosixPath, workspace: Workspace
) -> list[tuple[str, str, PurePosixPath | None]]:
    """(name, kind, real relative path) of the folder's visible entries; kind ``dir``,
    ``file`` or ``outside`` (a symlink leading out, or broken); a symlink leading inside is
    listed as what it names."""
    try:
        found = files.entries(folder)
    except (OSError, WorkspacePathError):
        return []  # unreadable folder (or swapped meanwhile): listed, not entered
    children: list[tuple[str, str, PurePosixPath | None]] = []
    for entry in found:
        if entry.name.startswith("."):
            continue
        real: PurePosixPath | None = folder / entry.name
        kind = "dir" if entry.kind == "dir" else "file"
        if entry.kind == "link":
            kind, real = _link_leads(files, folder / entry.name, workspace)
        children.append((entry.name, kind, real))
    return children


def _link_leads(
    files: ConfinedRoot, link: PurePosixPath, workspace: Workspace
) -> tuple[str, PurePosixPath | None]:
    """Where a listed symlink leads: (``dir`` or ``file``, its real path) when inside the
    workspace, (``outside``, None) when out or broken (only ever listed, never read)."""
    try:
        real = workspace.resolve(workspace.root / link)
    except ValueError:  # outside, or a loop
        return "outside", None
    relative = PurePosixPath(real.relative_to(workspace.root).as_posix())
    try:
        info = files.lstat(relative)
    except (OSError, WorkspacePathError):
        return "outside", None
    if info is None:
        return "file", None  # a broken link inside: listed by its name
    return ("dir" if stat.S_ISDIR(info.st_mode) else "file"), relative


def _read_text(files: ConfinedRoot, target: _File) -> str:
    shown = target.shown
    info = files.lstat(target.path)
    if info is None:
        raise ValueError(f"{shown} does not exist: create it first, or check the path")
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{shown} is a folder, not a file")
    if info.st_size > MAX_FILE_BYTES:
        raise ValueError(
            f"{shown} is too large for the file editor ({info.st_size} bytes); "
            "use the terminal (head, sed -n, grep) to read or change it"
        )
    # Type and size are checked again on the opened file itself (FIFOs and devices refused).
    data = files.read(target.path, MAX_FILE_BYTES)
    if b"\0" in data[:8192]:
        raise ValueError(f"{shown} looks binary: the file editor handles text files only")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{shown} is not UTF-8 text ({error.reason} at byte {error.start}); "
            "use the terminal to handle it"
        ) from None


def _split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept; only ``\\n`` ends a line (``\\r\\n`` keeps its ``\\r``)."""
    lines = text.split("\n")
    result = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        result.append(lines[-1])
    return result


def _occurrences(text: str, needle: str) -> list[int]:
    starts: list[int] = []
    position = text.find(needle)
    while position != -1:
        starts.append(position)
        position = text.find(needle, position + len(needle))
    return starts


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _edited(shown: str, text: str, first: int, last: int) -> str:
    lines = _split_lines(text)
    start = max(1, first - SNIPPET_CONTEXT)
    end = min(len(lines), max(first, last) + SNIPPET_CONTEXT)
    snippet = "\n".join(
        f"{number:6}\t{lines[number - 1].removesuffix(chr(10))}" for number in range(start, end + 1)
    )
    return (
        f"Edited {shown}. Lines {start}-{end} now read:\n{snippet}\n"
        "Check the change (undo_edit reverts it)."
    )
