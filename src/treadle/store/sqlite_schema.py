"""The SQLite store's file format: its schema, the forward migrations between versions, and
telling a Treadle store from any other file without ever modifying it.

A store made by an older Treadle opens in a newer one (the missing migrations run, in one
transaction); a store of a newer schema version, or a file that is not a store, is refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from treadle.events.branches import index_shapes
from treadle.store.audit_summary import sqlite_add_audit_checkpoints
from treadle.store.base import StoreError, shapes_from_rows
from treadle.store.conversation_rows import sqlite_add_listing_index
from treadle.store.eval_tables import sqlite_add_eval_tables
from treadle.store.sqlite_text import create_text_index
from treadle.store.status_columns import sqlite_add_status_columns
from treadle.store.usage_totals import sqlite_add_usage_totals

APPLICATION = "treadle"
SQLITE_MAGIC = b"SQLite format 3\x00"
DEFAULT_BUSY_TIMEOUT = 30.0


def _migration_1(conn: sqlite3.Connection) -> None:
    """The first schema: meta, conversations, events and their indexes."""
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('application', ?), ('schema_version', '0')",
        (APPLICATION,),
    )
    # `key` is the small integer that event rows and indexes repeat instead of the text id.
    conn.execute(
        """CREATE TABLE conversations (
            key INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            title TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            head_id TEXT,
            event_count INTEGER NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{}'
        )"""
    )
    # A rowid table, not WITHOUT ROWID: ~1 KB rows would spill into overflow pages of an index
    # b-tree. Rows are appended at the end of the rowid order, which keeps pages full.
    # `branch`: see the module docstring of treadle.store.sqlite.
    conn.execute(
        """CREATE TABLE events (
            conversation INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            id TEXT NOT NULL,
            parent_seq INTEGER NOT NULL,
            branch INTEGER NOT NULL,
            kind TEXT NOT NULL,
            source TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            time_us INTEGER NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (conversation, seq),
            UNIQUE (conversation, id)
        )"""
    )
    conn.execute("CREATE INDEX events_by_kind ON events (conversation, kind, seq)")
    conn.execute("CREATE INDEX events_by_source ON events (conversation, source, seq)")
    conn.execute("CREATE INDEX events_by_branch ON events (conversation, branch, seq)")
    conn.execute("CREATE INDEX events_by_time ON events (conversation, time_us, seq)")


def _migration_2(conn: sqlite3.Connection) -> None:
    """Fewer bytes and fewer pages written per append: the timestamp text stays in the payload
    only (filters use time_us), and one (kind, source) index replaces the kind and the source
    indexes (a filter on either is a few merged range scans of it)."""
    conn.execute("DROP INDEX events_by_kind")
    conn.execute("DROP INDEX events_by_source")
    conn.execute("ALTER TABLE events DROP COLUMN timestamp")
    conn.execute("CREATE INDEX events_by_kind_source ON events (conversation, kind, source, seq)")


def _migration_3(conn: sqlite3.Connection) -> None:
    """The branch index (treadle.events.branches): each event's depth and line, one row per
    line (= per head) kept by a trigger at append time, and children found by their parent.
    Existing logs are indexed here, one conversation at a time."""
    conn.execute("ALTER TABLE events ADD COLUMN depth INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE events ADD COLUMN line INTEGER NOT NULL DEFAULT 0")
    conn.execute("CREATE INDEX events_by_parent ON events (conversation, parent_seq)")
    conn.execute(
        """CREATE TABLE tree_lines (
            conversation INTEGER NOT NULL,
            line INTEGER NOT NULL,
            base INTEGER NOT NULL,
            head INTEGER NOT NULL,
            PRIMARY KEY (conversation, line)
        ) WITHOUT ROWID"""
    )
    conn.execute("CREATE UNIQUE INDEX tree_lines_by_head ON tree_lines (conversation, head)")
    for (key,) in conn.execute("SELECT key FROM conversations").fetchall():
        rows = conn.execute(
            "SELECT seq, id, parent_seq, kind FROM events WHERE conversation = ? ORDER BY seq",
            (key,),
        ).fetchall()
        lines, line_of, depth = index_shapes(shapes_from_rows(rows))
        conn.executemany(
            "UPDATE events SET depth = ?, line = ? WHERE conversation = ? AND seq = ?",
            [(depth[seq], line_of[seq], key, seq) for seq in range(len(rows))],
        )
        conn.executemany(
            "INSERT INTO tree_lines (conversation, line, base, head) VALUES (?, ?, ?, ?)",
            [(key, line.line, line.base, line.head) for line in lines],
        )
    # The append computes depth and line in its INSERT (sqlite.SqliteEventStore._INSERT);
    # this keeps the line rows, in the same transaction.
    conn.execute(
        """CREATE TRIGGER events_tree_lines AFTER INSERT ON events
        WHEN NEW.kind <> 'state_change' BEGIN
            UPDATE tree_lines SET head = NEW.seq
                WHERE conversation = NEW.conversation AND line = NEW.line AND NEW.line <> NEW.seq;
            INSERT INTO tree_lines (conversation, line, base, head)
                SELECT NEW.conversation, NEW.seq, NEW.parent_seq, NEW.seq
                WHERE NEW.line = NEW.seq;
        END"""
    )


def _migration_text_index(conn: sqlite3.Connection) -> None:
    """The text index (treadle.store.sqlite_text): an FTS5 trigram table filled behind the
    appends, and each conversation's high-water mark in it. Self-contained: it reads and
    changes nothing else, so it may run before or after any other migration."""
    create_text_index(conn)


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _migration_1,
    _migration_2,
    _migration_3,
    sqlite_add_usage_totals,  # running usage totals per conversation (store/usage_totals.py)
    _migration_text_index,
    sqlite_add_eval_tables,  # the eval tables, or the old eval layer's (store/eval_tables.py)
    sqlite_add_audit_checkpoints,  # the kept audit checkpoints (store/audit_summary.py)
    sqlite_add_status_columns,  # the last status per conversation (store/status_columns.py)
    sqlite_add_listing_index,  # the listing's order (store/conversation_rows.py)
]
"""``MIGRATIONS[v]`` upgrades a store from schema version v to v + 1, inside the transaction
that then records v + 1. A new store runs them all. Append new ones; never edit one that has
been released (stores in the field ran it)."""


def schema_version() -> int:
    """The schema version this Treadle writes (stores up to it open; newer ones are refused)."""
    return len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the store open on ``conn`` (inside a write transaction) to ``schema_version()``."""
    # Read again under the write lock: another process may have created or upgraded it.
    version = version_of(conn, path)
    for number in range(version, schema_version()):
        MIGRATIONS[number](conn)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(number + 1),))


def read_schema_version(path: Path) -> int:
    """The schema version of the store file at ``path`` (0: no file, an empty file or database).

    Never modifies the file; StoreError says why a file is refused. The version read may lag
    behind a WAL not yet checkpointed: ``migrate`` reads it again under the write lock.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    except OSError as error:
        raise StoreError(f"cannot read store file {path}: {error.strerror or error}") from None
    if size == 0:
        return 0
    try:
        with path.open("rb") as file:
            header = file.read(100)
    except OSError as error:
        raise StoreError(f"cannot read store file {path}: {error.strerror or error}") from None
    if not header.startswith(SQLITE_MAGIC) or len(header) < 100:
        raise StoreError(
            f"{path} is not a SQLite database, so not a Treadle store; give the path of a "
            "Treadle store or of a new file (the file was not modified)"
        )
    if _is_truncated(path, header, size):
        raise StoreError(
            f"{path} is truncated (shorter than its header says); restore it from a backup "
            "(the file was not modified)"
        )
    try:
        return _read_version(path, immutable=True)
    except StoreError:
        # The unlocked read may have met a checkpoint of another process halfway: ask again
        # with SQLite's locks before calling the file damaged. Without a WAL nobody has the
        # file open in WAL mode, so no checkpoint runs and the first answer stands.
        if not _wal_path(path).exists():
            raise
        return _read_version(path, immutable=False)


def _wal_path(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _read_version(path: Path, *, immutable: bool) -> int:
    # immutable=1 reads the main file alone and creates no -wal/-shm beside it (a plain
    # read-only connection leaves empty ones behind); neither kind of connection ever writes
    # (a read-write one would checkpoint a WAL into the file when it closes).
    uri = f"file:{quote(str(path))}?mode=ro" + ("&immutable=1" if immutable else "")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=DEFAULT_BUSY_TIMEOUT, isolation_level=None)
    except sqlite3.Error as error:
        raise StoreError(f"cannot open store file {path}: {error}") from None
    try:
        return version_of(conn, path)
    except sqlite3.DatabaseError as error:
        raise StoreError(
            f"{path} is damaged or not a Treadle store ({error}); restore it from a backup or "
            "use another file (the file was not modified)"
        ) from None
    finally:
        conn.close()


def _is_truncated(path: Path, header: bytes, size: int) -> bool:
    """Whether the file is shorter than the page count its header vouches for. Only without a
    WAL: a checkpoint killed midway may have written page 1 before extending the file, and the
    WAL it will be redone from is then still there."""
    wal = _wal_path(path)
    if wal.exists() and wal.stat().st_size > 0:
        return False
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    size_is_valid = pages > 0 and header[24:28] == header[92:96]
    return size_is_valid and size < pages * page_size


def version_of(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version of the database open on ``conn``; StoreError if it is not a Treadle
    store or is newer than this Treadle."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return 0
    if "meta" not in tables:
        raise StoreError(
            f"{path} is a SQLite database of another application, not a Treadle store; use "
            "another file (the file was not modified)"
        )
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    version = meta.get("schema_version")
    if meta.get("application") != APPLICATION or not str(version).isdigit():
        raise StoreError(
            f"{path} has a meta table but is not a Treadle store (application "
            f"{meta.get('application')!r}, schema version {version!r}); use another file "
            "(the file was not modified)"
        )
    found = int(str(version))
    if found > schema_version():
        raise StoreError(
            f"{path} was written by a newer Treadle (store schema version {found}, this Treadle "
            f"knows up to {schema_version()}); upgrade Treadle to open it (the file was not "
            "modified)"
        )
    return found


__all__ = [
    "APPLICATION",
    "MIGRATIONS",
    "migrate",
    "read_schema_version",
    "schema_version",
    "version_of",
]
