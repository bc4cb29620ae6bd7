"""What can be wrong with an OpenHands conversation folder, each finding naming its file.

A problem stops the folder from being imported (the events would not be the conversation); a
notice is reported and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UNREADABLE = "OPENHANDS-UNREADABLE"
"""A file that is empty, truncated, not UTF-8 or not JSON."""
INVALID_EVENT = "OPENHANDS-INVALID-EVENT"
"""JSON that is not an SDK event (a missing or mistyped field the SDK requires)."""
INDEX_GAP = "OPENHANDS-INDEX-GAP"
"""Event file indexes that skip a number (the SDK stops reading at the gap)."""
DUPLICATE_INDEX = "OPENHANDS-DUPLICATE-INDEX"
"""Two event files with one index (the SDK keeps an arbitrary one)."""
FILE_ID = "OPENHANDS-FILE-ID"
"""An event whose id differs from the id in its file name (the SDK indexes by the name)."""
TOO_MANY_EVENTS = "OPENHANDS-TOO-MANY-EVENTS"
"""More event files than the reader accepts."""
BASE_STATE = "OPENHANDS-BASE-STATE"
"""A ``base_state.json`` that cannot be read, or that has no usable conversation id."""
UNKNOWN_FILE = "OPENHANDS-UNKNOWN-FILE"
"""A file in ``events/`` that is not named like an event (the SDK ignores it): a notice."""
NOT_MODELLED = "OPENHANDS-NOT-MODELLED"
"""An event kept as ``foreign`` because Treadle cannot model it: a notice."""
RENDERING = "OPENHANDS-RENDERING"
"""A tool result whose text the SDK renders with tool code Treadle does not mirror: a notice."""
TREE_HEAD = "TREE-HEAD"
"""The saved head is not an event of the log (a problem) or lags behind its branch (a notice)."""


@dataclass(frozen=True, slots=True)
class FolderProblem:
    """One finding about a conversation folder: its code, the files and events at fault."""

    code: str
    message: str
    files: tuple[str, ...] = ()
    """Paths relative to the conversation folder, e.g. ``events/event-00003-<id>.json``."""
    event_ids: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        where = f" [{', '.join(self.files)}]" if self.files else ""
        return f"{self.code}: {self.message}{where}"

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "files": list(self.files),
            "event_ids": list(self.event_ids),
        }
