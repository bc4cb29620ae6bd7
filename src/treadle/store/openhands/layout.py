"""The SDK's on-disk layout: ``base_state.json`` plus ``events/event-NNNNN-<id>.json``.

Lists a folder's event files in index order (as the SDK's ``EventLog`` scans them) and finds
conversation folders; reports gaps, repeated indexes, stray names and oversized logs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from treadle.store.openhands.problems import (
    DUPLICATE_INDEX,
    INDEX_GAP,
    TOO_MANY_EVENTS,
    UNKNOWN_FILE,
    UNREADABLE,
    FolderProblem,
)

BASE_STATE = "base_state.json"
EVENTS_DIR = "events"
EVENT_NAME_RE = re.compile(r"^event-(?P<idx>\d{5,})-(?P<event_id>[0-9a-fA-F\-]{8,})\.json$")
"""As the SDK's ``persistence_const.EVENT_NAME_RE`` (1.58.2): 5+ digits, a hex/dash id."""
MAX_EVENTS = 100_000
"""Event files read per conversation; past it the folder is reported, not read."""


def event_file_name(index: int, event_id: str) -> str:
    """The SDK's name for the event at ``index`` (``EVENT_FILE_PATTERN``)."""
    return f"event-{index:05d}-{event_id}.json"


@dataclass(frozen=True, slots=True)
class EventFile:
    """One event file: its index, the event id its name carries, its path in the folder."""

    index: int
    event_id: str
    path: str
    """Relative to the conversation folder: ``events/<name>``."""


def is_conversation_folder(path: Path) -> bool:
    """Whether ``path`` looks like one SDK conversation (a base state or an events folder)."""
    return (path / BASE_STATE).is_file() or (path / EVENTS_DIR).is_dir()


def find_conversation_folders(path: Path) -> list[Path]:
    """``path`` itself when it is a conversation folder, else its conversation sub-folders
    (one level down, by name), as the SDK's persistence dir holds them."""
    if is_conversation_folder(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted(child for child in path.iterdir() if is_conversation_folder(child))


def list_event_files(
    folder: Path, *, max_events: int = MAX_EVENTS
) -> tuple[list[EventFile], list[FolderProblem], list[FolderProblem]]:
    """The event files of ``folder`` in index order, with (problems, notices).

    Every well-named file is listed, past a gap too (the SDK would stop there: a problem), so
    that an audit sees all of them; at most ``max_events`` are listed.
    """
    problems: list[FolderProblem] = []
    notices: list[FolderProblem] = []
    events_dir = folder / EVENTS_DIR
    if not events_dir.is_dir():
        return [], problems, notices
    by_index: dict[int, list[EventFile]] = {}
    # Names as strings and the directory's own file types: no stat per file (100,000 files).
    try:
        with os.scandir(events_dir) as scan:
            entries = sorted((entry.name, entry.is_file()) for entry in scan)
    except OSError as error:
        problems.append(
            FolderProblem(UNREADABLE, f"cannot be listed: {error.strerror or error}", (EVENTS_DIR,))
        )
        return [], problems, notices
    for name, is_file in entries:
        match = EVENT_NAME_RE.match(name)
        if match and is_file:
            index = int(match.group("idx"))
            file = EventFile(index, match.group("event_id"), f"{EVENTS_DIR}/{name}")
            by_index.setdefault(index, []).append(file)
        elif not name.startswith("."):  # the SDK's own sidecars: lock file, length marker
            notices.append(
                FolderProblem(
                    UNKNOWN_FILE,
                    f"{name!r} is not named like an event file (event-NNNNN-<id>.json); "
                    "the SDK ignores it, and so does the import",
                    files=(f"{EVENTS_DIR}/{name}",),
                )
            )
    files: list[EventFile] = []
    for index in sorted(by_index):
        same = by_index[index]
        if len(same) > 1:
            problems.append(
                FolderProblem(
                    DUPLICATE_INDEX,
                    f"{len(same)} event files share index {index}; the SDK would keep one of "
                    "them at random: remove or renumber the extra file(s)",
                    files=tuple(f.path for f in same),
                    event_ids=tuple(f.event_id for f in same),
                )
            )
        files.extend(same)
    _check_gaps(files, problems)
    if len(files) > max_events:
        first_over = files[max_events]
        problems.append(
            FolderProblem(
                TOO_MANY_EVENTS,
                f"the log has {len(files)} event files, more than the {max_events} the reader "
                f"accepts; only those before {first_over.path} were read",
                files=(first_over.path,),
            )
        )
        files = files[:max_events]
    return files, problems, notices


def _check_gaps(files: list[EventFile], problems: list[FolderProblem]) -> None:
    """The SDK reads indexes 0, 1, 2, ... and stops at the first missing one."""
    expected = 0
    for position, file in enumerate(files):
        if file.index < expected:  # a repeated index, reported already
            continue
        if file.index > expected:
            after = files[position:]
            missing = f"index {expected}" + (
                f" to {file.index - 1}" if file.index - 1 > expected else ""
            )
            problems.append(
                FolderProblem(
                    INDEX_GAP,
                    f"event files skip {missing}: the SDK reads only the {expected} event(s) "
                    f"before the gap and ignores the {len(after)} from {file.path} on; restore "
                    "the missing file(s) or renumber the later ones",
                    files=(file.path,),
                )
            )
            return
        expected = file.index + 1
