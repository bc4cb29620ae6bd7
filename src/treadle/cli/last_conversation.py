"""``-c``/``--continue``: the last conversation of a workspace, the one ``treadle run -c`` and
``treadle chat -c`` continue (as Claude Code's ``-c`` does for a folder).

"Last" is the most recently updated conversation whose stored settings name that workspace
(its resolved path); conversations without settings (imported) belong to no workspace.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from treadle.cli.output import EXIT_BAD_INPUT, fail

if TYPE_CHECKING:
    from treadle.store.base import ConversationInfo, EventStore

PAGE = 500


def last_conversation_id(store: EventStore, workspace: Path | None) -> str:
    """The id of the last conversation of ``workspace`` (default: the current folder); exit 2
    with one line when it has none."""
    from treadle.data.settings import SETTINGS_KEY

    folder = (Path.cwd() if workspace is None else workspace).resolve()
    wanted = str(folder)
    latest: ConversationInfo | None = None
    offset = 0
    while True:
        page = store.list_conversations(limit=PAGE, offset=offset)
        for info in page:
            settings = info.metadata.get(SETTINGS_KEY)
            if not isinstance(settings, dict) or settings.get("workspace") != wanted:
                continue
            if latest is None or info.updated_at > latest.updated_at:
                latest = info
        if len(page) < PAGE:
            break
        offset += PAGE
    if latest is None:
        store.close()
        fail(
            f"no conversation to continue in workspace {folder} (store {store.url}): start one "
            "with a TASK, or give --workspace DIR or --conversation ID",
            EXIT_BAD_INPUT,
        )
    return latest.id
