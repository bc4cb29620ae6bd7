"""The PostgreSQL store's URL, sessions (and their pool) and schema: all that is settled before
the first query. ``MIGRATIONS`` upgrade a schema a version at a time; a newer one is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from treadle.events.branches import index_shapes
from treadle.store.audit_summary import postgres_add_audit_checkpoints
from treadle.store.base import StoreError, shapes_from_rows
from treadle.store.conversation_rows import LISTING_INDEX
from treadle.store.eval_tables import postgres_add_eval_tables
from treadle.store.postgres_text import ensure_text_index
from treadle.store.status_columns import postgres_add_status_columns
from treadle.store.usage_totals import postgres_add_usage_totals

T = TypeVar("T")

APPLICATION = "treadle"
"""The ``application`` of a Treadle schema's meta table."""
DEFAULT_SCHEMA = "treadle"
DURABILITY_MODES = ("durable", "fast")
_SCHEMA_NAME = re.compile(r"(?!pg_)[A-Za-z0-9_$-]{1,63}")
"""Names that need no escaping beyond double quotes (always used), anywhere they go."""


def _index_lines(conn: psycopg.Connection[Any]) -> None:
    """Index the logs already stored (migration 2): depth and line of each event, and its lines."""
    keys = [row[0] for row in conn.execute("SELECT key FROM conversations").fetchall()]
    for key in keys:
        rows = conn.execute(
            "SELECT seq, id, parent_seq, kind FROM events WHERE conversation = %s ORDER BY seq",
            (key,),
        ).fetchall()
        lines, line_of, depth = index_shapes(shapes_from_rows(rows))
        with conn.cursor() as cursor:
            cursor.executemany(
                "UPDATE events SET depth = %s, line = %s WHERE conversation = %s AND seq = %s",
                [(depth[seq], line_of[seq], key, seq) for seq in range(len(rows))],
            )
            cursor.executemany(
                "INSERT INTO tree_lines (conversation, line, base, head) VALUES (%s, %s, %s, %s)",
                [(key, line.line, line.base, line.head) for line in lines],
            )


def _text_index(conn: psycopg.Connection[Any]) -> None:
    ensure_text_index(conn)


# Each entry upgrades the schema by one version; a new store runs them all from version 0, so
# creating and migrating are one code path. Append, never edit: stores in the field ran these.
MIGRATIONS: list[tuple[str | Callable[[psycopg.Connection[Any]], None], ...]] = [
    (
        """CREATE TABLE conversations (
            key bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            id text PRIMARY KEY,
            title text,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            head_id text,
            event_count bigint NOT NULL DEFAULT 0,
            -- json, not jsonb: kept as written (key order, numbers), the same as SQLite returns
            metadata json NOT NULL DEFAULT '{}'
        )""",
        # conversation is the small integer key: every index entry repeats it (disk per event)
        """CREATE TABLE events (
            conversation bigint NOT NULL REFERENCES conversations (key) ON DELETE CASCADE,
            seq bigint NOT NULL,
            id text NOT NULL,
            parent_seq bigint,
            branch bigint NOT NULL,
            kind text NOT NULL,
            source text NOT NULL,
            time_us bigint NOT NULL,
            -- event_to_json verbatim: jsonb would reorder keys and change what is read back
            payload text NOT NULL,
            PRIMARY KEY (conversation, seq),
            UNIQUE (conversation, id)
        )""",
        "CREATE INDEX events_by_branch ON events (conversation, branch, seq)",
        "CREATE INDEX events_by_kind ON events (conversation, kind, seq)",
        "CREATE INDEX events_by_source ON events (conversation, source, seq)",
        "CREATE INDEX events_by_time ON events (conversation, time_us)",
    ),
    (
        # The branch index (treadle.events.branches): depth and line of each event, one row
        # per line (= per head), children found by their parent; kept by the trigger below
        # in the append's own statement and transaction.
        "ALTER TABLE events ADD COLUMN depth bigint NOT NULL DEFAULT 0",
        "ALTER TABLE events ADD COLUMN line bigint NOT NULL DEFAULT 0",
        "CREATE INDEX events_by_parent ON events (conversation, parent_seq)",
        """CREATE TABLE tree_lines (
            conversation bigint NOT NULL REFERENCES conversations (key) ON DELETE CASCADE,
            line bigint NOT NULL,
            base bigint NOT NULL,
            head bigint NOT NULL,
            PRIMARY KEY (conversation, line)
        )""",
        "CREATE UNIQUE INDEX tree_lines_by_head ON tree_lines (conversation, head)",
        _index_lines,
        # A row trigger BEFORE the insert: it sees the rows a multi-row INSERT wrote before
        # this one (a batch), and sets the new row's own depth and line (next_line).
        """CREATE FUNCTION treadle_tree_line() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            parent_depth bigint;
            parent_line bigint;
            heading bigint;
        BEGIN
            IF NEW.parent_seq IS NULL THEN
                NEW.depth := 0;
                NEW.line := NEW.seq;
            ELSE
                SELECT depth, line INTO parent_depth, parent_line FROM events
                    WHERE conversation = NEW.conversation AND seq = NEW.parent_seq;
                NEW.depth := parent_depth + 1;
                IF NEW.kind = 'state_change' THEN
                    NEW.line := parent_line;
                ELSE
                    SELECT line INTO heading FROM tree_lines
                        WHERE conversation = NEW.conversation AND head = NEW.parent_seq;
                    NEW.line := coalesce(heading, NEW.seq);
                END IF;
            END IF;
            IF NEW.kind <> 'state_change' THEN
                IF NEW.line = NEW.seq THEN
                    INSERT INTO tree_lines (conversation, line, base, head)
                        VALUES (NEW.conversation, NEW.seq, coalesce(NEW.parent_seq, -1), NEW.seq);
                ELSE
                    UPDATE tree_lines SET head = NEW.seq
                        WHERE conversation = NEW.conversation AND line = NEW.line;
                END IF;
            END IF;
            RETURN NEW;
        END $$""",
        "CREATE TRIGGER events_tree_line BEFORE INSERT ON events "
        "FOR EACH ROW EXECUTE FUNCTION treadle_tree_line()",
    ),
    # running usage totals per conversation (store/usage_totals.py)
    (postgres_add_usage_totals,),
    (
        # The text index (treadle.store.postgres_text): a pg_trgm GIN index on the payloads.
        # Self-contained: it reads and changes nothing else, so it may run in any order
        # with other migrations. When pg_trgm cannot be had, text filters keep scanning and
        # each later open tries again (prepare_schema).
        _text_index,
    ),
    (
        # Line heads once per statement, not once per row. The row trigger above moved a
        # line's head with an UPDATE per event: a batch of n events on one line updated one
        # row n times in one transaction, and each update walks the row's versions made
        # before it, so an import of 50,000 events took ten minutes (O(n^2)). Now the row
        # trigger tells whether the parent heads its line without tree_lines (a parent that
        # is not a state change and has no such child yet: the rule of next_line), inserts
        # the rows of new lines, and a statement trigger moves each line's head once, to the
        # last of the statement's events on it.
        """CREATE OR REPLACE FUNCTION treadle_tree_line() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            parent_depth bigint;
            parent_line bigint;
            parent_kind text;
        BEGIN
            IF NEW.parent_seq IS NULL THEN
                NEW.depth := 0;
                NEW.line := NEW.seq;
            ELSE
                SELECT depth, line, kind INTO parent_depth, parent_line, parent_kind FROM events
                    WHERE conversation = NEW.conversation AND seq = NEW.parent_seq;
                NEW.depth := parent_depth + 1;
                IF NEW.kind = 'state_change' THEN
                    NEW.line := parent_line;
                ELSIF parent_kind <> 'state_change' AND NOT EXISTS (
                    SELECT 1 FROM events WHERE conversation = NEW.conversation
                        AND parent_seq = NEW.parent_seq AND kind <> 'state_change'
                ) THEN
                    NEW.line := parent_line;
                ELSE
                    NEW.line := NEW.seq;
                END IF;
            END IF;
            IF NEW.kind <> 'state_change' AND NEW.line = NEW.seq THEN
                INSERT INTO tree_lines (conversation, line, base, head)
                    VALUES (NEW.conversation, NEW.seq, coalesce(NEW.parent_seq, -1), NEW.seq);
            END IF;
            RETURN NEW;
        END $$""",
        # Each statement may run again (a store whose recorded version was set back).
        """CREATE OR REPLACE FUNCTION treadle_tree_heads() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE tree_lines AS t SET head = moved.head
                FROM (SELECT conversation, line, max(seq) AS head FROM new_events
                      WHERE kind <> 'state_change' GROUP BY conversation, line) AS moved
                WHERE t.conversation = moved.conversation AND t.line = moved.line
                    AND t.head < moved.head;
            RETURN NULL;
        END $$""",
        "DROP TRIGGER IF EXISTS events_tree_heads ON events",
        "CREATE TRIGGER events_tree_heads AFTER INSERT ON events "
        "REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT "
        "EXECUTE FUNCTION treadle_tree_heads()",
    ),
    # the eval tables, or the old eval layer's brought up to date (store/eval_tables.py)
    (postgres_add_eval_tables,),
    # the kept audit checkpoints (store/audit_summary.py)
    (postgres_add_audit_checkpoints,),
    # the last status per conversation (store/status_columns.py)
    (postgres_add_status_columns,),
    # the listing's order as an index (store/conversation_rows.py)
    (LISTING_INDEX,),
]
SCHEMA_VERSION = len(MIGRATIONS)


def parse_postgres_url(url: str) -> tuple[str, str, str]:
    """(libpq URL without Treadle's parameters, schema, durability) of a ``postgresql://`` URL.

    Treadle's own query parameters: ``schema`` (default ``treadle``) and ``durability``
    (``durable``: every acknowledged append is on disk; ``fast``: asynchronous commit).
    """
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise StoreError(f"{url!r} is not a PostgreSQL URL; write postgresql://user@host:port/db")
    params = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in params if key in ("schema", "durability")}
    rest = [(key, value) for key, value in params if key not in ours]
    schema = ours.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema):
        raise StoreError(
            f"schema {schema!r} in {url!r} is not a usable schema name; use letters, digits, "
            "_, - or $ (at most 63, not starting with pg_)"
        )
    durability = ours.get("durability", "durable")
    if durability not in DURABILITY_MODES:
        raise StoreError(
            f"durability {durability!r} in {url!r} is unknown; use one of {DURABILITY_MODES}"
        )
    conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))
    return conninfo, schema, durability


def prepare_schema(conn: psycopg.Connection[Any], schema: str, *, create: bool) -> None:
    """Make or migrate the store's schema; StoreError, with nothing changed, when it cannot
    be used. ``create`` False: a schema without a store is an error instead of being made."""
    with conn.transaction():
        if not create and not _has_table(conn, schema, "meta"):
            raise StoreError(
                f"there is no Treadle store in schema {schema!r} of {conn.info.dsn}; check the "
                "--store URL (?schema=)"
            )
        # concurrent first opens must not race on CREATE SCHEMA / CREATE TABLE
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"treadle:{schema}",))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        if _has_table(conn, schema, "meta"):
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            version_text = meta.get("schema_version", "")
            if meta.get("application") != APPLICATION or not version_text.isdigit():
                raise StoreError(
                    f"schema {schema!r} has a meta table but is not a Treadle store "
                    f"(application {meta.get('application')!r}, schema version "
                    f"{meta.get('schema_version')!r}); use another ?schema= name"
                )
            version = int(version_text)
        else:
            if _has_table(conn, schema):
                raise StoreError(
                    f"schema {schema!r} already holds tables that are not a Treadle store; "
                    "use another ?schema= name"
                )
            conn.execute("CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)")
            conn.execute(
                "INSERT INTO meta VALUES ('application', %s), ('schema_version', '0')",
                (APPLICATION,),
            )
            version = 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"schema {schema!r} was written by a newer Treadle (store schema version "
                f"{version}, this Treadle knows up to {SCHEMA_VERSION}); upgrade Treadle. "
                "The store was not modified."
            )
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                if callable(statement):
                    statement(conn)
                else:
                    conn.execute(statement)
        if version == SCHEMA_VERSION:
            ensure_text_index(conn)  # refused when it was migrated: try again
        if version < SCHEMA_VERSION:
            conn.execute(
                "UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )


def _has_table(conn: psycopg.Connection[Any], schema: str, name: str | None = None) -> bool:
    """Whether ``schema`` holds the table ``name`` (any table when None)."""
    row = conn.execute(
        "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = coalesce(%s, tablename) "
        "LIMIT 1",
        (schema, name),
    ).fetchone()
    return row is not None
