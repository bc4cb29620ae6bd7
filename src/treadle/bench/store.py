"""``treadle bench store``: a store's append rate (against raw sqlite3 in the same run), growth,
window/path/search times, reader RSS and bytes on disk, for SQLite or PostgreSQL.

Sizes scale with ``events`` (the big conversation): the full run, a million events, is
``treadle bench store --events 1000000`` (about 1.3 GB of disk and several minutes); the
default, 100,000, takes about a minute. Events are the realistic mix of
``bench.workload`` (~900 bytes of JSON each).
"""

from __future__ import annotations

import functools
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from treadle.bench.workload import realistic_chunks, realistic_events
from treadle.events.model import ROOT, Event, event_to_json
from treadle.store.audit_summary import keep_imported
from treadle.store.base import EventQuery, EventStore
from treadle.store.sqlite import SqliteEventStore, connection_pragmas
from treadle.store.sqlite_schema import MIGRATIONS
from treadle.store.time_keys import timestamp_us
from treadle.store.urls import open_store, sqlite_path_and_options

CHUNK = 1_000
"""Appends per growth sample, events per batch when building big conversations."""
WINDOW_CONVERSATION = 20_000
SEARCH_RUNS = 7


def event_chunks(total: int, *, seed: int, first_parent: str = ROOT) -> Iterator[list[Event]]:
    """``total`` realistic events forming one chain, in lists of up to CHUNK (so a
    million-event conversation never sits in memory at once)."""
    return realistic_chunks(total, CHUNK, seed=seed, first_parent=first_parent)


def median_time(runs: int, action: Callable[[], Any]) -> float:
    """Median seconds of ``runs`` calls: robust to the other work of a shared machine."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- where the bench writes --------------------------------------------------------------------


@dataclass
class Place:
    """The stores of one bench run: SQLite files in a directory, or fresh PostgreSQL schemas."""

    url: str | None

    def __post_init__(self) -> None:
        self.backend = "postgres" if self.url and self.url.startswith("postgres") else "sqlite"
        self._temporary: str | None = None
        self._schemas: list[str] = []
        self._files: list[Path] = []
        if self.backend == "sqlite":
            if self.url is None:
                self._temporary = tempfile.mkdtemp(prefix="treadle-bench-")
                self.directory = Path(self._temporary)
            else:
                path, _ = sqlite_path_and_options(self.url)
                self.directory = path.parent if path.suffix == ".db" else path
                self.directory.mkdir(parents=True, exist_ok=True)

    def store_url(self, name: str, durability: str) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{self._fresh(f'bench-{name}.db')}?durability={durability}"
        assert self.url is not None
        schema = f"treadle_bench_{name}_{uuid.uuid4().hex[:8]}"
        self._schemas.append(schema)
        parts = urlsplit(self.url)
        query = dict(parse_qsl(parts.query))
        query.update(schema=schema, durability=durability)
        return urlunsplit(parts._replace(query=urlencode(query)))

    def raw_path(self, name: str) -> Path:
        return self._fresh(f"bench-raw-{name}.db")

    def _fresh(self, name: str) -> Path:
        """A path for a new file (a bench starts from empty files), removed at cleanup."""
        path = self.directory / name
        self._remove(path)
        self._files.append(path)
        return path

    @staticmethod
    def _remove(path: Path) -> None:
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()

    def cleanup(self) -> None:
        for path in self._files:
            self._remove(path)
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
        if self._schemas and self.url is not None:
            import psycopg

            from treadle.store.postgres import parse_postgres_url

            conninfo, _, _ = parse_postgres_url(self.url)
            with psycopg.connect(conninfo, autocommit=True) as conn:
                for schema in self._schemas:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- appends -----------------------------------------------------------------------------------


class RawSqlite:
    """Raw sqlite3 doing the same writes as an append (event row + conversation row, one
    transaction each) in the same schema and mode, with every value computed beforehand."""

    INSERT = (
        "INSERT INTO events (conversation, seq, id, parent_seq, branch, kind, source, "
        "time_us, payload) VALUES (1, ?, ?, ?, 0, ?, ?, ?, ?)"
    )

    def __init__(self, path: Path, durability: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        for pragma in connection_pragmas(durability):  # the store's own settings
            self.conn.execute(pragma)
        self.conn.execute("BEGIN")
        for migration in MIGRATIONS:
            migration(self.conn)
        self.conn.execute(
            "INSERT INTO conversations (key, id, created_at, updated_at) VALUES (1, 'c', '', '')"
        )
        self.conn.execute("COMMIT")
        self.seq = 0

    @staticmethod
    def rows(events: list[Event]) -> list[tuple[Any, ...]]:
        return [
            (e.id, e.kind, e.source, e.timestamp, timestamp_us(e.timestamp), event_to_json(e))
            for e in events
        ]

    def append(self, rows: list[tuple[Any, ...]]) -> float:
        conn = self.conn
        start = time.perf_counter()
        for event_id, kind, source, timestamp, moment, payload in rows:
            seq = self.seq
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(self.INSERT, (seq, event_id, seq - 1, kind, source, moment, payload))
            conn.execute(
                "UPDATE conversations SET event_count = ?, head_id = ?, updated_at = ? "
                "WHERE key = 1",
                (seq + 1, event_id, timestamp),
            )
            conn.execute("COMMIT")
            self.seq += 1
        return time.perf_counter() - start

    def close(self) -> None:
        self.conn.close()


def time_appends(store: EventStore, conversation: str, events: list[Event]) -> float:
    start = time.perf_counter()
    for event in events:
        store.append(conversation, event)
    return time.perf_counter() - start


@dataclass
class AppendRun:
    """Seconds of each CHUNK of appends, by Treadle and by raw sqlite3 (empty for postgres)."""

    treadle: list[float]
    raw: list[float]

    def rate(self, chunks: list[float]) -> float | None:
        return len(chunks) * CHUNK / sum(chunks) if chunks else None


def measure_appends(place: Place, durability: str, count: int, *, seed: int) -> AppendRun:
    """Appends one by one, Treadle and raw sqlite3 alternating chunk by chunk, so both meet
    the same moments of the machine's load and the same file growth."""
    store = open_store(place.store_url(f"append-{durability}", durability))
    raw = RawSqlite(place.raw_path(durability), durability) if place.backend == "sqlite" else None
    run = AppendRun([], [])
    try:
        conversation = store.create_conversation("append").id
        for events in event_chunks(count, seed=seed):
            if raw is not None:
                run.raw.append(raw.append(RawSqlite.rows(events)))
            run.treadle.append(time_appends(store, conversation, events))
    finally:
        store.close()
        if raw is not None:
            raw.close()
    return run


WRITERS = 8


def measure_concurrent_appends(
    place: Place, count: int, *, writers: int = WRITERS, rounds: int = 3, slices: int = 10
) -> dict[str, Any]:
    """Durable appends from ``writers`` threads at once, each to its own conversation (a
    server running that many conversations), in aggregate per second, against raw sqlite3's
    single-writer durable commits; each figure a median of ``rounds``, and the appends per
    commit the store's group commit achieved.

    Within a round the two alternate in ``slices`` short slices (raw sqlite3's commits, then
    the writers' as many appends each), and the ratio is taken within the round: this disk's
    fsync latency swings 2-5x within seconds, so a raw rate measured apart, even just before,
    made the ratio anything from 0.7 to 4.7 for the same code."""
    per_slice = max(1, count // writers // slices)
    aggregate: list[float] = []
    raw_rates: list[float] = []
    ratios: list[float] = []
    units_per_commit: list[float] = []
    for round_ in range(rounds):
        raw = (
            RawSqlite(place.raw_path(f"writers-{round_}"), "durable")
            if place.backend == "sqlite"
            else None
        )
        raw_rows = RawSqlite.rows(
            [e for chunk in event_chunks(per_slice * slices, seed=10 + round_) for e in chunk]
        )
        store = open_store(place.store_url(f"writers-{round_}", "durable"))
        try:
            ids = [store.create_conversation(f"writer-{n}").id for n in range(writers)]
            chunks = [
                [e for chunk in event_chunks(per_slice * slices, seed=100 + n) for e in chunk]
                for n in range(writers)
            ]
            commits = getattr(store, "_commits", None)
            groups_before = commits.groups if commits is not None else 0
            gate = threading.Barrier(writers + 1)
            threads = [
                threading.Thread(target=_write_slices, args=(store, cid, events, per_slice, gate))
                for cid, events in zip(ids, chunks, strict=True)
            ]
            for thread in threads:
                thread.start()
            raw_seconds = seconds = 0.0
            for slice_ in range(slices):
                if raw is not None:
                    raw_seconds += raw.append(
                        raw_rows[slice_ * per_slice : (slice_ + 1) * per_slice]
                    )
                gate.wait()  # the writers start their slice ...
                began = time.perf_counter()
                gate.wait()  # ... and have all ended it
                seconds += time.perf_counter() - began
            for thread in threads:
                thread.join()
            total = writers * per_slice * slices
            aggregate.append(total / seconds)
            if raw is not None:
                raw_rates.append(per_slice * slices / raw_seconds)
                ratios.append(aggregate[-1] / raw_rates[-1])
            if commits is not None:
                units_per_commit.append(total / max(1, commits.groups - groups_before))
        finally:
            store.close()
            if raw is not None:
                raw.close()
    figures: dict[str, Any] = {
        f"append_durable_{writers}_writers_per_s": statistics.median(aggregate),
        f"appends_per_commit_{writers}_writers": (
            statistics.median(units_per_commit) if units_per_commit else None
        ),
    }
    if ratios:
        figures[f"raw_sqlite_durable_{writers}_writers_rounds_per_s"] = statistics.median(raw_rates)
        figures[f"append_durable_{writers}_writers_over_raw_sqlite"] = statistics.median(ratios)
    return figures


def _write_slices(
    store: EventStore, conversation: str, events: list[Event], per_slice: int, gate: Any
) -> None:
    for start in range(0, len(events), per_slice):
        gate.wait()
        for event in events[start : start + per_slice]:
            store.append(conversation, event)
        gate.wait()


def growth_ratio(chunks: list[float]) -> tuple[float, float]:
    """(last chunk / first chunk, median of the last tenth / median of the first tenth)."""
    tenth = max(1, len(chunks) // 10)
    smooth = statistics.median(chunks[-tenth:]) / statistics.median(chunks[:tenth])
    return chunks[-1] / chunks[0], smooth


# -- reads -------------------------------------------------------------------------------------


def build_conversation(
    store: EventStore, conversation: str, total: int, *, seed: int, forks: int = 0
) -> tuple[str, str | None, int]:
    """Append ``total`` events in batches; with ``forks``, side branches of 200 events leave
    the main chain at even intervals. (main head id, a side head id, JSON bytes appended)."""
    store.create_conversation(conversation)
    fork_every = total // (forks + 1) if forks else total + 1
    next_fork = fork_every
    parent = ROOT
    side_head = None
    json_bytes = 0
    made = 0
    for events in event_chunks(total, seed=seed):
        if parent != ROOT:
            events[0] = events[0].model_copy(update={"parent_id": parent})
        store.append_batch(conversation, events)
        json_bytes += sum(len(event_to_json(e)) for e in events)
        made += len(events)
        parent = events[-1].id
        if forks and made >= next_fork and made < total:
            next_fork += fork_every
            side = realistic_events(200, seed=seed + 7 * made)
            side[0] = side[0].model_copy(update={"parent_id": parent})
            store.append_batch(conversation, side, move_head=False)
            json_bytes += sum(len(event_to_json(e)) for e in side)
            side_head = side[-1].id
            # the main chain goes on from the fork point: the side branch is a sibling
    assert store.head(conversation) == parent
    return parent, side_head, json_bytes


SEARCHES: dict[str, Callable[[str, str, int], EventQuery]] = {
    "search_all_s": lambda head, side, n: EventQuery(after_seq=n // 2),
    "search_kind_s": lambda head, side, n: EventQuery(kinds=["message"]),
    "search_kinds_desc_s": lambda head, side, n: EventQuery(
        kinds=["message", "action"], order="desc", before_seq=n * 3 // 4
    ),
    "search_source_s": lambda head, side, n: EventQuery(sources=["user"], after_seq=n // 3),
    "search_seq_range_s": lambda head, side, n: EventQuery(
        after_seq=n // 2, before_seq=n // 2 + 500, order="desc"
    ),
    "search_branch_s": lambda head, side, n: EventQuery(branch_head=head, after_seq=n // 2),
    "search_branch_desc_s": lambda head, side, n: EventQuery(branch_head=side, order="desc"),
    "search_branch_kind_s": lambda head, side, n: EventQuery(
        branch_head=head, kinds=["message"], sources=["user"]
    ),
}


def measure_searches(
    store: EventStore, conversation: str, head: str, side: str, n: int
) -> dict[str, float]:
    figures: dict[str, float] = {}
    for name, make in SEARCHES.items():
        query = make(head, side, n)
        page = store.search(conversation, query)
        assert len(page.items) == 100, (name, len(page.items))
        figures[name] = median_time(
            SEARCH_RUNS, functools.partial(store.search, conversation, query)
        )
    text = EventQuery(text="no such words anywhere")
    figures.update(catch_up_text_index(store))
    figures["search_text_s"] = median_time(3, lambda: store.search(conversation, text))
    return figures


def catch_up_text_index(store: EventStore) -> dict[str, float]:
    """Index the store's text now, as the SQLite store's indexer thread does behind the
    appends (treadle.store.sqlite_text), so that text searches are measured on the index and
    nothing indexes in the background of later figures: {"text_index_s": seconds,
    "text_index_per_event_us": ..., "text_index_bytes_per_event": ...}; {} for a store whose
    index is kept by the append."""
    if not isinstance(store, SqliteEventStore):
        return {}
    store.checkpoint()
    size = store.file_size()
    begin = time.perf_counter()
    indexed = store.index_text()
    seconds = time.perf_counter() - begin
    store.checkpoint()
    return {
        "text_index_s": seconds,
        "text_index_per_event_us": seconds / indexed * 1e6 if indexed else 0.0,
        "text_index_bytes_per_event": (store.file_size() - size) / indexed if indexed else 0.0,
    }


IMPORT_EVENTS = 200_000
"""Events of the import at most (one batch, held in memory whole as an import holds it)."""

AFTER_IMPORT = """
import json, statistics, sys, time
from treadle.store.audit_summary import audit_stored
from treadle.store.base import EventQuery
from treadle.store.urls import open_store
store = open_store(sys.argv[1])
def median_ms(query):
    times = []
    for _ in range(5):
        start = time.perf_counter()
        page = store.search(sys.argv[2], query)
        times.append(time.perf_counter() - start)
        assert page.items == []
    return statistics.median(times) * 1000
# an indexable needle in no event; then one no index answers (2 characters): the scan
figures = {
    "search_after_import_ms": median_ms(EventQuery(text="needle qzxjwv nowhere")),
    "search_scan_after_import_ms": median_ms(EventQuery(text="\u00f1\u00f8")),
}
# the process's first audit of it: from the checkpoint the import kept, nothing walked again
start = time.perf_counter()
audit_stored(store, sys.argv[2])
figures["audit_after_import_s"] = time.perf_counter() - start
store.close()
print(json.dumps(figures))
"""


def measure_search_after_import(place: Place, count: int) -> dict[str, float]:
    """A ``count``-event log stored as one batch (what ``treadle import`` does), durably, then
    text searches from a fresh process right after: ``import_s``, the index's state when the
    import returned (``import_text_index_left``: SQLite, events above its mark; PostgreSQL,
    pending-list pages), ``search_after_import_ms`` (a needle the index answers) and, for
    the same log, ``search_scan_after_import_ms`` (one it cannot: every event read), and
    their ratio; ``import_checkpoint_s``, what keeping the log's audit checkpoint adds to the
    import (``audit_summary.keep_imported``), and ``audit_after_import_s``, the fresh
    process's first audit of it, which starts from that checkpoint."""
    url = place.store_url("import", "durable")
    events = [event for chunk in event_chunks(count, seed=6) for event in chunk]
    store = open_store(url)
    try:
        store.create_conversation("imported")
        begin = time.perf_counter()
        store.append_batch("imported", events)
        seconds = time.perf_counter() - begin
        begin = time.perf_counter()
        keep_imported(store, "imported", events)
        checkpoint_seconds = time.perf_counter() - begin
        if isinstance(store, SqliteEventStore):
            left = store.text_index_lag("imported")
        else:
            from treadle.store.postgres import PostgresEventStore

            assert isinstance(store, PostgresEventStore)
            left = store.index_text()  # merging says how many pages were pending
    finally:
        store.close()
    result = subprocess.run(
        [sys.executable, "-c", AFTER_IMPORT, url, "imported"],
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(result.stdout)
    figures.update(
        import_events=count,
        import_s=seconds,
        import_checkpoint_s=checkpoint_seconds,
        import_text_index_left=left,
        search_after_import_over_scan=(
            figures["search_after_import_ms"] / figures["search_scan_after_import_ms"]
        ),
    )
    return figures


READER = """
import json, sys, time
from treadle.store.base import EventQuery
from treadle.store.urls import open_store
start = time.perf_counter()
store = open_store(sys.argv[1])
window = store.path_to_root(sys.argv[2], limit=50)
page = store.search(sys.argv[2], EventQuery(kinds=["message"], order="desc"))
elapsed = time.perf_counter() - start
assert len(window) == 50 and len(page.items) == 100
store.close()
# VmHWM: this process's own peak; ru_maxrss would count the parent's size at fork (Linux)
status = open("/proc/self/status").read()
peak_kib = int(status.split("VmHWM:")[1].split()[0])
print(json.dumps({"rss_mib": peak_kib / 1024, "cold_process_window_s": elapsed}))
"""


def reader_process(url: str, conversation: str) -> dict[str, float]:
    """Peak RSS of a fresh process that opens the store and reads a window and a page."""
    result = subprocess.run(
        [sys.executable, "-c", READER, url, conversation],
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(result.stdout)
    return figures


def postgres_bytes(url: str) -> int:
    import psycopg

    from treadle.store.postgres import parse_postgres_url

    conninfo, schema, _ = parse_postgres_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0] or 0) if row is not None else 0


# -- the run -----------------------------------------------------------------------------------


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"[bench store] {message}", file=sys.stderr, flush=True)


def run_store_bench(
    url: str | None = None, *, events: int = 100_000, progress: bool = False
) -> dict[str, Any]:
    """Every store figure (README, Benchmarks) for the store at ``url`` (see the module docstring)."""
    place = Place(url)
    durable_count = min(10_000, max(CHUNK, events // 10))
    fast_count = min(100_000, events)
    window_size = min(WINDOW_CONVERSATION, events)
    figures: dict[str, Any] = {"backend": place.backend, "events": events}
    try:
        _say(progress, f"{durable_count} durable appends (and raw sqlite3) ...")
        durable = measure_appends(place, "durable", durable_count, seed=1)
        _say(progress, f"{fast_count} fast appends (and raw sqlite3) ...")
        fast = measure_appends(place, "fast", fast_count, seed=2)
        last_first, smoothed = growth_ratio(fast.treadle)
        raw_durable, raw_fast = durable.rate(durable.raw), fast.rate(fast.raw)
        durable_rate, fast_rate = durable.rate(durable.treadle), fast.rate(fast.treadle)
        assert durable_rate is not None  # each run appends at least one chunk
        assert fast_rate is not None
        figures.update(
            append_durable_per_s=durable_rate,
            append_fast_per_s=fast_rate,
            raw_sqlite_durable_per_s=raw_durable,
            raw_sqlite_fast_per_s=raw_fast,
            raw_durable_over_treadle=None if raw_durable is None else raw_durable / durable_rate,
            raw_fast_over_treadle=None if raw_fast is None else raw_fast / fast_rate,
            appends_durable=durable_count,
            appends_fast=fast_count,
            append_growth_ratio=last_first,
            append_growth_ratio_smoothed=smoothed,
            raw_sqlite_growth_ratio_smoothed=growth_ratio(fast.raw)[1] if fast.raw else None,
        )

        _say(progress, f"{WRITERS} writers appending durably at once ...")
        figures.update(measure_concurrent_appends(place, min(4_000, max(800, events // 25))))

        _say(progress, f"a {window_size}-event conversation: window and full path ...")
        window_url = place.store_url("window", "fast")
        store = open_store(window_url)
        try:
            build_conversation(store, "window", window_size, seed=3)
        finally:
            store.close()

        def open_and_window() -> None:
            opened = open_store(window_url)
            assert len(opened.path_to_root("window", limit=50)) == 50
            opened.close()

        figures["open_and_window_s"] = median_time(5, open_and_window)
        store = open_store(window_url)
        try:
            figures["full_path_s"] = median_time(3, lambda: store.path_to_root("window"))
            path = store.path_to_root("window")
            figures["full_path_events"] = len(path)
            # the same events through json.loads alone, in the same run: a floor for any
            # reader of this JSON, and a figure that a loaded machine slows alike
            lines = [event_to_json(event) for event in path]
            json_loads = median_time(3, lambda: [json.loads(line) for line in lines])
            figures["full_path_vs_json_loads"] = figures["full_path_s"] / json_loads
        finally:
            store.close()

        _say(progress, f"a {events}-event conversation with side branches ...")
        big_url = place.store_url("big", "fast")
        store = open_store(big_url)
        try:
            head, side, json_bytes = build_conversation(store, "big", events, seed=4, forks=3)
            total = store.get_conversation("big").event_count
            assert side is not None
            figures["path_window_big_s"] = median_time(
                SEARCH_RUNS, lambda: store.path_to_root("big", limit=50)
            )
            _say(progress, "searches ...")
            figures["search_events"] = total
            searches = measure_searches(store, "big", head, side, total)
            figures["search_page_s"] = max(
                value
                for name, value in searches.items()
                if name.startswith("search_") and not name.startswith("search_text")
            )
            figures.update(searches)
            if isinstance(store, SqliteEventStore):
                store.checkpoint()
                disk = store.file_size()
            else:
                disk = postgres_bytes(big_url)
        finally:
            store.close()
        figures["disk_bytes_per_event"] = disk / total
        figures["json_bytes_per_event"] = json_bytes / total
        figures["disk_vs_json"] = disk / json_bytes
        _say(progress, "reader process RSS ...")
        figures.update(reader_process(big_url, "big"))

        imported = min(events, IMPORT_EVENTS)
        _say(progress, f"a {imported}-event import, then text searches from a fresh process ...")
        figures.update(measure_search_after_import(place, imported))
    finally:
        place.cleanup()
    return {name: _rounded(value) for name, value in figures.items()}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}")
    return value


__all__ = ["run_store_bench"]
