"""SQL of the PostgreSQL store's reads: event filters, search pages and path segments.

Every statement reads one conversation through an index in seq order and stops at its page.
"""

from __future__ import annotations

from typing import Any

import psycopg

from treadle.store.base import EventNotFound, EventQuery
from treadle.store.time_keys import time_us

NO_LIMIT = 2**62

SEGMENTS_SQL = """WITH RECURSIVE segment (branch, last, depth) AS (
        SELECT branch, seq, 1 FROM events WHERE conversation = %(key)s AND id = %(head)s
      UNION ALL
        SELECT fork.branch, fork.seq, s.depth + 1 FROM segment s
        -- Each step is two primary-key probes. LIMIT 1 keeps the subqueries as they are:
        -- as plain joins, without statistics, the planner hashed the whole conversation
        -- at every step (5 s at a million events).
        CROSS JOIN LATERAL (
            SELECT parent_seq FROM events
            WHERE conversation = %(key)s AND seq = s.branch LIMIT 1
        ) start
        CROSS JOIN LATERAL (
            SELECT branch, seq FROM events
            WHERE conversation = %(key)s AND seq = start.parent_seq LIMIT 1
        ) fork
        -- fork.seq < s.branch always holds for rows this store wrote; it also ends
        -- the walk on a damaged row instead of looping
        WHERE s.branch > %(floor)s AND s.depth < %(most)s AND fork.seq < s.branch
    )
    SELECT branch, last FROM segment"""
"""The segments of a path from its head down (params: key, head, floor, most)."""

PATH_RANGE_SQL = (
    "SELECT payload FROM events WHERE conversation = %(key)s AND branch = %(branch)s "
    "AND seq BETWEEN %(first)s AND %(last)s ORDER BY seq DESC LIMIT %(limit)s"
)
"""The last ``limit`` events of one segment of a path, newest first."""


def path_segments(
    conn: psycopg.Connection[Any],
    conversation_id: str,
    key: int,
    head_id: str,
    *,
    floor: int | None = None,
    most: int | None = None,
) -> list[tuple[int, int, int]]:
    """The path of ``head_id`` as (branch, first seq, last seq) segments, head first.

    Stops once a segment reaches ``floor`` or below, or after ``most`` segments. One
    statement: a segment's start hangs from the fork point in the segment below.
    """
    rows = conn.execute(
        SEGMENTS_SQL,
        {
            "key": key,
            "head": head_id,
            "floor": -1 if floor is None else floor,
            "most": NO_LIMIT if most is None else max(most, 1),
        },
    ).fetchall()
    if not rows:
        raise EventNotFound(conversation_id, head_id)
    return sorted(((int(b), int(b), int(last)) for b, last in rows), key=lambda s: -s[2])


def page_sql(query: EventQuery, filters: str, order: str) -> str:
    """A search page without a branch: rows in seq order, stopping after %(fetch)s matches.

    Several kinds (or sources) are one ordered index scan each, merged: the scans stop at the
    page, where a single scan of them all would read every match and sort it.
    """
    page = f"ORDER BY seq {order} LIMIT %(fetch)s"
    for column, values in (("kind", query.kinds), ("source", query.sources)):
        if values is not None and len(dict.fromkeys(values)) > 1:
            own = f"{column} = ANY(%({column})s)"
            scans = " UNION ALL ".join(
                f"(SELECT seq, payload FROM events WHERE conversation = %(key)s "
                f"AND {column} = (%({column})s::text[])[{index}]{filters.replace(own, 'true')} "
                f"{page})"
                for index in range(1, len(dict.fromkeys(values)) + 1)
            )
            return f"SELECT seq, payload FROM ({scans}) AS scans {page}"
    return f"SELECT seq, payload FROM events WHERE conversation = %(key)s{filters} {page}"


def filters_of(query: EventQuery) -> tuple[str, dict[str, Any]]:
    """SQL conditions (each starting " AND ") and parameters for every filter of ``query``
    except the conversation and the branch."""
    params: dict[str, Any] = {}
    where: list[str] = []
    for column, values in (("kind", query.kinds), ("source", query.sources)):
        if values is None:
            continue
        distinct = list(dict.fromkeys(values))
        # one value as "=": the (conversation, column, seq) index then also gives the order
        if len(distinct) == 1:
            where.append(f"{column} = %({column})s")
            params[column] = distinct[0]
        else:
            where.append(f"{column} = ANY(%({column})s)")
            params[column] = distinct
    if query.after_seq is not None:
        where.append("seq > %(after_seq)s")
        params["after_seq"] = query.after_seq
    if query.before_seq is not None:
        where.append("seq < %(before_seq)s")
        params["before_seq"] = query.before_seq
    if query.time_from is not None:
        where.append("time_us >= %(time_from)s")
        params["time_from"] = time_us(query.time_from)
    if query.time_to is not None:
        where.append("time_us < %(time_to)s")
        params["time_to"] = time_us(query.time_to)
    if query.text is not None:
        # "***=" makes the rest of the pattern a literal string; ~* then matches it without
        # regard to case, measured a third faster than ILIKE '%...%' over the same rows.
        where.append("payload ~* %(text)s")
        params["text"] = "***=" + query.text
    return "".join(f" AND {condition}" for condition in where), params


def only_cursors(query: EventQuery) -> bool:
    filters = (query.kinds, query.sources, query.time_from, query.time_to, query.text)
    return all(value is None for value in filters)
