"""How the SQLite store answers paths and searches from its indexes: branch segments of a path,
and for a search page the one index that yields it in seq order, the other filters on its rows.

Every statement here is an index search bounded by the page size or the matches; none reads a
whole log (tests/store/test_sqlite.py checks the query plans), except a text filter the text
index cannot answer (treadle.store.sqlite_text: needles under 3 characters or beyond ASCII, and
the events not indexed yet), which is checked on each row the page's index yields.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from treadle.errors import TreeError
from treadle.store.base import EventQuery
from treadle.store.sqlite_text import (
    candidates,
    index_count,
    index_rows,
    indexable,
    indexed_count,
)
from treadle.store.time_keys import time_us

Segment = tuple[int, int, int]
"""(branch, lowest seq, highest seq): a run of a path inside one branch."""

Row = tuple[int, str]
"""(seq, payload)."""

_TIME_PROBE = 2000
"""A time-filtered page reads candidates from the time index when at most this many match."""
_NO_SEQ = 2**62
_TEXT_CANDIDATES = 5000
"""See ``text_split``: more candidates than this, and a filtered page or a count does without
the text index (~1 ms to find out)."""


def path_segments(
    conn: sqlite3.Connection, key: int, start: tuple[int, int], floor: int = -1
) -> Iterator[Segment]:
    """The path of the event at ``start`` = (seq, branch), as segments from the head down,
    stopping after the segment that reaches ``floor`` or below.

    A branch is named by the seq of its first event, so a segment is (branch, branch, high):
    every event of the branch up to ``high`` is on the path. One point lookup per fork.
    """
    high, branch = start
    while True:
        yield branch, branch, high
        if branch <= floor:
            return
        # The segment's first event (seq == branch) hangs from the fork point below.
        row = conn.execute(
            "SELECT p.seq, p.branch FROM events c JOIN events p "
            "ON p.conversation = c.conversation AND p.seq = c.parent_seq "
            "WHERE c.conversation = ? AND c.seq = ?",
            (key, branch),
        ).fetchone()
        if row is None:
            return
        fork, fork_branch = int(row[0]), int(row[1])
        if fork >= branch or fork_branch > fork:
            # Impossible for rows this store wrote (a parent precedes its child); a damaged
            # file must not make the walk loop (TREE-CYCLE).
            raise TreeError(
                "TREE-CYCLE", f"the stored parent of seq {branch} is seq {fork}, not an earlier one"
            )
        high, branch = fork, fork_branch


def path_payloads(
    conn: sqlite3.Connection, key: int, segments: Iterable[Segment], limit: int | None
) -> list[str]:
    """Payloads of the path, head first, at most ``limit``: one range scan per segment."""
    payloads: list[str] = []
    for branch, low, high in segments:
        wanted = -1 if limit is None else limit - len(payloads)
        payloads.extend(
            payload
            for (payload,) in conn.execute(
                "SELECT payload FROM events WHERE conversation = ? AND branch = ? "
                "AND seq BETWEEN ? AND ? ORDER BY seq DESC LIMIT ?",
                (key, branch, low, high, wanted),
            )
        )
        if limit is not None and len(payloads) >= limit:
            break
    return payloads


def row_filters(query: EventQuery, *, skip: Sequence[str] = ()) -> tuple[str, list[Any]]:
    """SQL conditions (each starting with " AND ") and parameters for the filters of ``query``
    other than the conversation, seq cursors, branch and the columns in ``skip``.

    Columns are written ``+column``: SQLite then keeps to the index the caller chose for the
    page order instead of switching to another one and sorting every match.
    """
    conditions: list[str] = []
    params: list[Any] = []
    for column, values in (("kind", query.kinds), ("source", query.sources)):
        if values is not None and column not in skip:
            distinct = list(dict.fromkeys(values))
            conditions.append(f"+{column} IN ({','.join('?' * len(distinct))})")
            params.extend(distinct)
    if query.time_from is not None and "time" not in skip:
        conditions.append("+time_us >= ?")
        params.append(time_us(query.time_from))
    if query.time_to is not None and "time" not in skip:
        conditions.append("+time_us < ?")
        params.append(time_us(query.time_to))
    if query.text is not None:
        needle = query.text.lower()
        if needle.isascii():
            # SQLite's lower() folds ASCII only, which is all an ASCII needle can match.
            conditions.append("instr(lower(payload), ?) > 0")
        else:
            conditions.append("treadle_icontains(payload, ?)")  # str.lower in Python
        params.append(needle)
    return "".join(f" AND {condition}" for condition in conditions), params


def icontains(payload: str | None, needle: str) -> bool:
    """``treadle_icontains``: the text filter for needles beyond ASCII."""
    return payload is not None and needle in payload.lower()


def matches_nothing(query: EventQuery) -> bool:
    return (query.kinds is not None and not query.kinds) or (
        query.sources is not None and not query.sources
    )


def text_split(
    conn: sqlite3.Connection, key: int, query: EventQuery, *, counting: bool = False
) -> int | None:
    """How many events of the conversation the text index holds, when the query's text
    filter is answered by the index for part of the query's seq range; else None.

    The index reads its candidates one by one in seq order. That is the best way for a rare
    needle, and for a frequent one when nothing else filters (the page fills at once); but a
    count, or a page whose kind, source or time filter rejects most of a frequent needle's
    candidates, would read them all. So those ask the index first whether the needle has
    more than _TEXT_CANDIDATES candidates (reading at most that many), and if so are
    answered as without the index, by the other filters' index.
    """
    if query.text is None or not indexable(query.text.lower()):
        return None
    indexed = indexed_count(conn, key)
    if indexed <= 0 or (query.after_seq is not None and query.after_seq >= indexed - 1):
        return None
    filtered = query.kinds is not None or query.sources is not None
    filtered = filtered or query.time_from is not None or query.time_to is not None
    needle = query.text.lower()
    if (counting or filtered) and candidates(
        conn, key, needle, indexed, _TEXT_CANDIDATES
    ) > _TEXT_CANDIDATES:
        return None
    return indexed


def _indexed_part(
    query: EventQuery, segments: list[Segment] | None, indexed: int
) -> tuple[int, int, str, list[Any]]:
    """(low, high, conditions, params) of the indexed part of a text query: seqs strictly
    between low and high, and the filters (the text rechecked) to check on each candidate."""
    low = -1 if query.after_seq is None else query.after_seq
    high = indexed if query.before_seq is None else min(query.before_seq, indexed)
    conditions, params = row_filters(query)
    if segments is not None:
        ranges = " OR ".join("(branch = ? AND seq BETWEEN ? AND ?)" for _ in segments)
        conditions += f" AND ({ranges})" if segments else " AND 0"
        params.extend(value for segment in segments for value in segment)
    return low, high, conditions, params


def _tail(query: EventQuery, indexed: int) -> EventQuery:
    """The query restricted to the events the text index does not hold yet."""
    after = indexed - 1 if query.after_seq is None else max(query.after_seq, indexed - 1)
    return dataclasses.replace(query, after_seq=after)


def page_rows(
    conn: sqlite3.Connection,
    key: int,
    query: EventQuery,
    fetch: int,
    segments: list[Segment] | None,
) -> list[Row]:
    """Up to ``fetch`` rows of ``query`` in page order; ``segments``: the branch's path, when
    the query has a branch head. One index drives the page: the text index for a text filter
    it can answer (its un-indexed tail scanned as below), else the branch's segments, else the
    (kind, source) index (one range scan per pair, merged by seq), else the time index when few
    events match, else the seq order itself."""
    if fetch <= 0 or matches_nothing(query):
        return []
    indexed = text_split(conn, key, query)
    if indexed is None:
        return _page_rows(conn, key, query, fetch, segments)
    assert query.text is not None
    low, high, conditions, params = _indexed_part(query, segments, indexed)
    order = "DESC" if query.order == "desc" else "ASC"
    needle = query.text.lower()

    def from_index(wanted: int) -> list[Row]:
        return index_rows(conn, key, needle, low, high, conditions, params, order, wanted)

    tail = _tail(query, indexed)
    if order == "DESC":  # the newest first: the tail, then the index
        rows = _page_rows(conn, key, tail, fetch, segments)
        return rows + from_index(fetch - len(rows)) if len(rows) < fetch else rows
    rows = from_index(fetch)
    return rows + _page_rows(conn, key, tail, fetch - len(rows), segments)


def _page_rows(
    conn: sqlite3.Connection,
    key: int,
    query: EventQuery,
    fetch: int,
    segments: list[Segment] | None,
) -> list[Row]:
    """``page_rows`` without the text index."""
    if fetch <= 0:
        return []
    desc = query.order == "desc"
    low = -1 if query.after_seq is None else query.after_seq
    high = _NO_SEQ if query.before_seq is None else query.before_seq
    order = "DESC" if desc else "ASC"
    if segments is not None:
        conditions, params = row_filters(query)
        rows: list[Row] = []
        for branch, first, last in reversed(segments) if not desc else segments:
            if last <= low or first >= high:
                continue
            rows.extend(
                conn.execute(
                    "SELECT seq, payload FROM events WHERE conversation = ? AND branch = ? "
                    f"AND seq BETWEEN ? AND ? AND seq > ? AND seq < ?{conditions} "
                    f"ORDER BY seq {order} LIMIT ?",
                    (key, branch, first, last, low, high, *params, fetch - len(rows)),
                ).fetchall()
            )
            if len(rows) >= fetch:
                break
        return rows
    if query.kinds is not None or query.sources is not None:
        conditions, params = row_filters(query, skip=("kind", "source"))
        scans = [
            conn.execute(
                f"SELECT seq{', payload' if conditions else ''} FROM events "
                "WHERE conversation = ? AND kind = ? AND source = ? AND seq > ? AND seq < ?"
                f"{conditions} ORDER BY seq {order} LIMIT ?",
                (key, kind, source, low, high, *params, fetch),
            ).fetchall()
            for kind, source in kind_source_pairs(conn, key, query)
        ]
        merged = list(
            itertools.islice(
                heapq.merge(*scans, key=lambda row: -row[0] if desc else row[0]), fetch
            )
        )
        if conditions:
            return merged
        # The scans read the index alone; only the page's rows are read from the table.
        return payloads_of(conn, key, [row[0] for row in merged], order)
    conditions, params = row_filters(query)
    if query.time_from is not None or query.time_to is not None:
        candidates = time_candidates(conn, key, query, low, high)
        if candidates is not None:
            candidates.sort(reverse=desc)
            text_conditions, text_params = row_filters(query, skip=("time",))
            if not text_conditions:
                return payloads_of(conn, key, candidates[:fetch], order)
            return conn.execute(
                "SELECT seq, payload FROM events WHERE conversation = ? AND seq IN "
                f"(SELECT value FROM json_each(?)){text_conditions} ORDER BY seq {order} LIMIT ?",
                (key, json.dumps(candidates), *text_params, fetch),
            ).fetchall()
    return conn.execute(
        "SELECT seq, payload FROM events WHERE conversation = ? AND seq > ? AND seq < ?"
        f"{conditions} ORDER BY seq {order} LIMIT ?",
        (key, low, high, *params, fetch),
    ).fetchall()


def count_rows(
    conn: sqlite3.Connection,
    key: int,
    event_count: int,
    query: EventQuery,
    segments: list[Segment] | None,
) -> int:
    """How many events ``query`` matches (its order and limit aside)."""
    if matches_nothing(query):
        return 0
    indexed = text_split(conn, key, query, counting=True)
    if indexed is None:
        return _count_rows(conn, key, event_count, query, segments)
    assert query.text is not None
    low, high, conditions, params = _indexed_part(query, segments, indexed)
    in_index = index_count(conn, key, query.text.lower(), low, high, conditions, params)
    return in_index + _count_rows(conn, key, event_count, _tail(query, indexed), segments)


def _count_rows(
    conn: sqlite3.Connection,
    key: int,
    event_count: int,
    query: EventQuery,
    segments: list[Segment] | None,
) -> int:
    """``count_rows`` without the text index."""
    low = -1 if query.after_seq is None else query.after_seq
    high = event_count if query.before_seq is None else min(query.before_seq, event_count)
    if segments is not None:
        conditions, params = row_filters(query)
        return sum(
            conn.execute(
                "SELECT count(*) FROM events WHERE conversation = ? AND branch = ? "
                f"AND seq BETWEEN ? AND ? AND seq > ? AND seq < ?{conditions}",
                (key, branch, first, last, low, high, *params),
            ).fetchone()[0]
            for branch, first, last in segments
        )
    if query.kinds is not None or query.sources is not None:
        conditions, params = row_filters(query, skip=("kind", "source"))
        return sum(
            conn.execute(
                "SELECT count(*) FROM events WHERE conversation = ? AND kind = ? AND source = ? "
                f"AND seq > ? AND seq < ?{conditions}",
                (key, kind, source, low, high, *params),
            ).fetchone()[0]
            for kind, source in kind_source_pairs(conn, key, query)
        )
    conditions, params = row_filters(query)
    if not conditions:
        return max(0, high - low - 1)  # seqs are gap-free from 0
    if query.time_from is not None or query.time_to is not None:
        candidates = time_candidates(conn, key, query, low, high)
        if candidates is not None:
            text_conditions, text_params = row_filters(query, skip=("time",))
            if not text_conditions:
                return len(candidates)
            return int(
                conn.execute(
                    "SELECT count(*) FROM events WHERE conversation = ? AND seq IN "
                    f"(SELECT value FROM json_each(?)){text_conditions}",
                    (key, json.dumps(candidates), *text_params),
                ).fetchone()[0]
            )
    return int(
        conn.execute(
            f"SELECT count(*) FROM events WHERE conversation = ? AND seq > ? AND seq < ?{conditions}",
            (key, low, high, *params),
        ).fetchone()[0]
    )


def kind_source_pairs(
    conn: sqlite3.Connection, key: int, query: EventQuery
) -> list[tuple[str, str]]:
    """The (kind, source) pairs ``query`` asks for that occur in the conversation, found by
    skipping through the (kind, source) index (one seek per pair, whatever the log's size)."""
    kinds = None if query.kinds is None else list(dict.fromkeys(query.kinds))
    sources = None if query.sources is None else list(dict.fromkeys(query.sources))
    if kinds is not None and sources is not None:
        return [(kind, source) for kind in kinds for source in sources]
    if kinds is None:
        assert sources is not None
        return [(kind, source) for kind in _distinct(conn, key, "kind") for source in sources]
    return [(kind, source) for kind in kinds for source in _distinct(conn, key, "source", kind)]


def _distinct(
    conn: sqlite3.Connection, key: int, column: str, kind: str | None = None
) -> list[str]:
    """The values of ``column`` (kind, or source within ``kind``) present in the conversation,
    one index seek each: a loose scan of the (kind, source) index."""
    where = "conversation = ?" + (" AND kind = ?" if kind is not None else "")
    params: tuple[Any, ...] = (key,) if kind is None else (key, kind)
    values: list[str] = []
    value = conn.execute(f"SELECT min({column}) FROM events WHERE {where}", params).fetchone()[0]
    while value is not None:
        values.append(value)
        value = conn.execute(
            f"SELECT min({column}) FROM events WHERE {where} AND {column} > ?", (*params, value)
        ).fetchone()[0]
    return values


def time_candidates(
    conn: sqlite3.Connection, key: int, query: EventQuery, low: int, high: int
) -> list[int] | None:
    """Seqs in the time range and seq bounds, read from the time index alone, when at most
    _TIME_PROBE match; None when more do (a scan in seq order then meets matches soon)."""
    lower = -_NO_SEQ if query.time_from is None else time_us(query.time_from)
    upper = _NO_SEQ if query.time_to is None else time_us(query.time_to)
    rows = conn.execute(
        "SELECT seq FROM events INDEXED BY events_by_time WHERE conversation = ? "
        "AND time_us >= ? AND time_us < ? AND seq > ? AND seq < ? LIMIT ?",
        (key, lower, upper, low, high, _TIME_PROBE + 1),
    ).fetchall()
    if len(rows) > _TIME_PROBE:
        return None
    return [seq for (seq,) in rows]


def payloads_of(conn: sqlite3.Connection, key: int, seqs: list[int], order: str) -> list[Row]:
    if not seqs:
        return []
    return conn.execute(
        "SELECT seq, payload FROM events WHERE conversation = ? AND seq IN "
        f"(SELECT value FROM json_each(?)) ORDER BY seq {order}",
        (key, json.dumps(seqs)),
    ).fetchall()


__all__ = [
    "count_rows",
    "icontains",
    "page_rows",
    "path_payloads",
    "path_segments",
    "row_filters",
    "text_split",
]
