"""Query checks and paging shared by the backends: a query no backend can answer is refused
the same way, and a page is cut from rows the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from treadle.store.base import EventPage, EventQuery, StoredEvent


def check_query(query: EventQuery) -> None:
    """Refuse a query no backend can answer, with what to change."""
    if query.limit < 0:
        raise ValueError(f"EventQuery.limit must be >= 0, got {query.limit}")
    if query.order not in ("asc", "desc"):
        raise ValueError(f"EventQuery.order must be 'asc' or 'desc', got {query.order!r}")


def page_of(rows: Sequence[StoredEvent], limit: int) -> EventPage:
    """A page from up to ``limit + 1`` rows fetched in page order: the extra row only says that
    there is a next page, so ``next_cursor`` is None exactly at the end."""
    items = list(rows[:limit])
    more = len(rows) > limit and bool(items)
    return EventPage(items=items, next_cursor=items[-1].seq if more else None)
