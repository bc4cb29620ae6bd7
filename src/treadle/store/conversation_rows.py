"""Conversation rows: the metadata a conversation row holds, written as JSON text, a
conversations row read back as ``ConversationInfo`` (a damaged one named as such), and the
index the listing reads them in order by.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from treadle.data.status import STATUS_VALUES
from treadle.events.json_limits import JsonLimitError, check_json_value
from treadle.store.base import ConversationInfo, StoreError

LISTING_INDEX = (
    "CREATE INDEX IF NOT EXISTS conversations_by_creation ON conversations (created_at, key)"
)
"""The order conversations are listed in (oldest first) as an index, a schema step on both
backends: a page then reads its rows in order instead of sorting every conversation of the
store first (22 ms a page at 3,400 conversations on PostgreSQL, and growing with the store,
for each poll of a listing)."""


def sqlite_add_listing_index(conn: sqlite3.Connection) -> None:
    conn.execute(LISTING_INDEX)


def metadata_json(metadata: Mapping[str, Any] | None) -> str:
    """The conversation metadata as JSON text, refusing what is not a JSON object."""
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping):
        raise TypeError(f"conversation metadata must be a JSON object, got {type(metadata)}")
    try:
        # NaN, a lone surrogate (which dumps fine but no store can encode), too deep, ...
        check_json_value(dict(metadata))
        return json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise JsonLimitError(f"conversation metadata is not JSON-serialisable: {error}") from None


def conversation_info(row: Sequence[Any], moment: Callable[[Any], datetime]) -> ConversationInfo:
    """A conversations row (id, title, created_at, updated_at, head_id, event_count, metadata,
    prompt_tokens, completion_tokens, cost_usd, status, status_reason) as ConversationInfo;
    ``moment`` reads a time column. A damaged row is a StoreError naming the conversation and
    the column, never a bare ValueError."""
    column = "created_at"
    try:
        created_at = moment(row[2])
        column = "updated_at"
        updated_at = moment(row[3])
        column = "event_count"
        event_count = int(row[5])
        column = "metadata"
        metadata = row[6] if isinstance(row[6], dict) else json.loads(row[6])
        if not isinstance(metadata, dict):
            raise ValueError(f"a JSON {type(metadata).__name__}, not an object")
        column = "usage totals"
        prompt, completion, cost = int(row[7]), int(row[8]), float(row[9])
        column = "status"
        status, reason = row[10], row[11]
        if status is not None and status not in STATUS_VALUES:
            raise ValueError(f"{status!r} is no status")
    except (TypeError, ValueError) as error:
        raise StoreError(
            f"the store is damaged: conversation {row[0]!r} has a bad {column} "
            f"({_reason(error)}); run 'treadle store check' and restore it from a backup"
        ) from None
    return ConversationInfo(
        id=row[0],
        title=row[1],
        created_at=created_at,
        updated_at=updated_at,
        head_id=row[4],
        event_count=event_count,
        metadata=metadata,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=cost,
        status=status,
        status_reason=reason,
    )


def _reason(error: Exception) -> str:
    """An error's text short enough for a one-line message."""
    text = str(error)
    return text if len(text) <= 120 else text[:117] + "..."
