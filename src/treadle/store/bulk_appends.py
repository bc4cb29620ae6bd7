"""Bulk appends: what an ``append_batch`` of many events (an import, a copied log) pays before
it returns that a live append leaves for later, so that the conversation it filled is read at
full speed at once.

A live append (the runtime's: one model response's events, a few at a time) keeps its speed
by not filling the text index: the SQLite store's indexer does that behind the appends, and a
search scans the events not yet indexed meanwhile, which costs ~1 µs an event. Imported all
at once, a log of 200,000 events would make every search after it scan them all (~0.25 s)
until the indexer caught up, minutes later. So a batch of ``BULK_APPEND_EVENTS`` or more
brings the text index up to date before it returns (SQLite: the index rows and the mark;
PostgreSQL: the GIN index's pending list merged into the index).
"""

from __future__ import annotations

BULK_APPEND_EVENTS = 256
"""An ``append_batch`` of at least this many events is a bulk append. Equal to the tail a
SQLite search scans before it asks the indexer (``sqlite_text.TAIL_TO_INDEX``): a smaller
batch leaves no more to scan than a search already tolerates, and no live batch is this big."""


def is_bulk(event_count: int) -> bool:
    """Whether an ``append_batch`` of ``event_count`` events pays for its text index."""
    return event_count >= BULK_APPEND_EVENTS


__all__ = ["BULK_APPEND_EVENTS", "is_bulk"]
