"""Where an eval's results are kept: two tables beside the conversations in the same store
(SQLite or PostgreSQL), each task's row naming the conversation of its last attempt.

The tables are the eval layer's own, with their own forward migrations and version
(``eval_schema_version`` in the store's ``meta``), so the event store's schema is unchanged
and a store made before evals existed gains them on first use. ``eval_runs``: one row per
eval (its task file's digest, the digest of its inputs, its settings, the engine of its last
run). ``eval_tasks``: one row per task, epoch and eval: ``state`` ``running`` (an attempt was handed to a worker),
``done`` (a result is stored) or ``not_run`` (no result after its retries), the number of
attempts, the conversation of the last one, and the result as the report shows it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from treadle.errors import TreadleError
from treadle.store.base import StoreError

TaskState = Literal["running", "done", "not_run"]


class EvalNotFound(TreadleError):
    def __init__(self, eval_id: str) -> None:
        self.eval_id = eval_id
        super().__init__(f"no eval {eval_id!r} in this store")


class EvalMismatch(TreadleError, ValueError):
    """An eval id given again with another task file or other settings."""


@dataclass(frozen=True)
class EvalRecord:
    id: str
    tasks_file: str
    tasks_sha256: str
    settings: dict[str, Any]
    engine: dict[str, Any]
    task_ids: tuple[str, ...]
    created_at: str
    updated_at: str
    inputs_sha256: str = ""
    """A digest of the task file and every task's starting and hidden files (tasks.inputs):
    changed files never resume an old eval. Empty for an eval made before it was kept."""


@dataclass(frozen=True)
class TaskRecord:
    eval_id: str
    task_id: str
    position: int
    state: TaskState
    attempts: int
    conversation_id: str | None
    passed: bool
    result: dict[str, Any] | None
    updated_at: str
    epoch: int = 1


class EvalResults(Protocol):
    """The eval tables of one store."""

    def begin_eval(self, record: EvalRecord) -> EvalRecord: ...
    def get_eval(self, eval_id: str) -> EvalRecord: ...
    def list_evals(self, *, limit: int = 100, offset: int = 0) -> list[EvalRecord]: ...
    def tasks(self, eval_id: str) -> list[TaskRecord]: ...
    def results_of(self, conversation_id: str) -> list[tuple[str, str, int]]: ...
    def start_attempt(
        self, eval_id: str, task_id: str, position: int, conversation_id: str, epoch: int = 1
    ) -> int: ...
    def finish(
        self, eval_id: str, task_id: str, result: dict[str, Any], epoch: int = 1
    ) -> None: ...
    def give_up(
        self, eval_id: str, task_id: str, result: dict[str, Any], epoch: int = 1
    ) -> None: ...
    def close(self) -> None: ...


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class _SqlResults:
    """The queries, written once with ``?`` placeholders; a backend runs them."""

    placeholder = "?"

    def _execute(self, query: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    def _rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _sql(self, query: str) -> str:
        return query.replace("?", self.placeholder)

    def begin_eval(self, record: EvalRecord) -> EvalRecord:
        """Store a new eval, or check that ``record`` is the stored one (same tasks, same
        settings: ``EvalMismatch`` otherwise) and record the engine of this run."""
        try:
            stored = self.get_eval(record.id)
        except EvalNotFound:
            self._execute(
                "INSERT INTO eval_runs (id, tasks_file, tasks_sha256, settings, engine, task_ids, "
                "created_at, updated_at, inputs_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (
                    record.id,
                    record.tasks_file,
                    record.tasks_sha256,
                    json.dumps(record.settings, sort_keys=True),
                    json.dumps(record.engine, sort_keys=True),
                    json.dumps(list(record.task_ids)),
                    record.created_at,
                    record.updated_at,
                    record.inputs_sha256,
                ),
            )
            stored = self.get_eval(record.id)
        if stored.tasks_sha256 != record.tasks_sha256:
            raise EvalMismatch(
                f"eval {record.id} was made from another task file ({stored.tasks_file}, "
                f"sha256 {stored.tasks_sha256[:12]}…): give another --eval-id, or leave it out "
                "(the default id follows the task file and the model settings)"
            )
        if stored.inputs_sha256 and stored.inputs_sha256 != record.inputs_sha256:
            raise EvalMismatch(
                f"eval {record.id} was made from other starting or hidden files (the task file "
                "is the same, the files it names changed): its results are not of these files; "
                "give another --eval-id, or leave it out (the default id follows the files)"
            )
        if stored.settings != record.settings:
            raise EvalMismatch(
                f"eval {record.id} was made with other model settings "
                f"({json.dumps(stored.settings, sort_keys=True)}): give another --eval-id"
            )
        self._execute(
            "UPDATE eval_runs SET engine = ?, updated_at = ? WHERE id = ?",
            (json.dumps(record.engine, sort_keys=True), now_text(), record.id),
        )
        return self.get_eval(record.id)

    def get_eval(self, eval_id: str) -> EvalRecord:
        rows = self._rows(f"SELECT {_EVAL_COLUMNS} FROM eval_runs WHERE id = ?", (eval_id,))
        if not rows:
            raise EvalNotFound(eval_id)
        return _eval_record(rows[0])

    def list_evals(self, *, limit: int = 100, offset: int = 0) -> list[EvalRecord]:
        rows = self._rows(
            f"SELECT {_EVAL_COLUMNS} FROM eval_runs ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [_eval_record(row) for row in rows]

    def tasks(self, eval_id: str) -> list[TaskRecord]:
        rows = self._rows(
            "SELECT eval_id, task_id, position, state, attempts, conversation_id, passed, "
            "result, updated_at, epoch FROM eval_tasks WHERE eval_id = ? "
            "ORDER BY position, epoch",
            (eval_id,),
        )
        return [
            TaskRecord(
                eval_id=row[0],
                task_id=row[1],
                position=row[2],
                state=row[3],
                attempts=row[4],
                conversation_id=row[5],
                passed=bool(row[6]),
                result=None if row[7] is None else json.loads(row[7]),
                updated_at=row[8],
                epoch=int(row[9]),
            )
            for row in rows
        ]

    def results_of(self, conversation_id: str) -> list[tuple[str, str, int]]:
        """The (eval id, task id, epoch) whose attempt ``conversation_id`` is."""
        rows = self._rows(
            "SELECT eval_id, task_id, epoch FROM eval_tasks WHERE conversation_id = ? "
            "ORDER BY eval_id, position, epoch",
            (conversation_id,),
        )
        return [(row[0], row[1], int(row[2])) for row in rows]

    def start_attempt(
        self, eval_id: str, task_id: str, position: int, conversation_id: str, epoch: int = 1
    ) -> int:
        """Record that an attempt at the task's ``epoch`` was handed to a worker; its number."""
        self._execute(
            "INSERT INTO eval_tasks (eval_id, task_id, epoch, position, state, attempts, "
            "conversation_id, passed, result, updated_at) VALUES (?, ?, ?, ?, 'running', 1, ?, "
            "0, NULL, ?) ON CONFLICT (eval_id, task_id, epoch) DO UPDATE SET state = 'running', "
            "attempts = eval_tasks.attempts + 1, conversation_id = excluded.conversation_id, "
            "passed = 0, result = NULL, updated_at = excluded.updated_at",
            (eval_id, task_id, epoch, position, conversation_id, now_text()),
        )
        rows = self._rows(
            "SELECT attempts FROM eval_tasks WHERE eval_id = ? AND task_id = ? AND epoch = ?",
            (eval_id, task_id, epoch),
        )
        return int(rows[0][0])

    def finish(self, eval_id: str, task_id: str, result: dict[str, Any], epoch: int = 1) -> None:
        self._end(eval_id, task_id, epoch, "done", result)

    def give_up(self, eval_id: str, task_id: str, result: dict[str, Any], epoch: int = 1) -> None:
        self._end(eval_id, task_id, epoch, "not_run", result)

    def _end(
        self, eval_id: str, task_id: str, epoch: int, state: str, result: dict[str, Any]
    ) -> None:
        self._execute(
            "UPDATE eval_tasks SET state = ?, passed = ?, result = ?, updated_at = ? "
            "WHERE eval_id = ? AND task_id = ? AND epoch = ?",
            (
                state,
                1 if result.get("passed") else 0,
                json.dumps(result, ensure_ascii=False),
                now_text(),
                eval_id,
                task_id,
                epoch,
            ),
        )


_EVAL_COLUMNS = (
    "id, tasks_file, tasks_sha256, settings, engine, task_ids, created_at, updated_at, "
    "inputs_sha256"
)


def _eval_record(row: tuple[Any, ...]) -> EvalRecord:
    return EvalRecord(
        id=row[0],
        tasks_file=row[1],
        tasks_sha256=row[2],
        settings=json.loads(row[3]),
        engine=json.loads(row[4]),
        task_ids=tuple(json.loads(row[5])),
        created_at=row[6],
        updated_at=row[7],
        inputs_sha256=row[8],
    )


EVAL_TABLES = (
    """CREATE TABLE eval_runs (
        id TEXT PRIMARY KEY,
        tasks_file TEXT NOT NULL,
        tasks_sha256 TEXT NOT NULL,
        settings TEXT NOT NULL,
        engine TEXT NOT NULL,
        task_ids TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    """CREATE TABLE eval_tasks (
        eval_id TEXT NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
        task_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'done', 'not_run')),
        attempts INTEGER NOT NULL,
        conversation_id TEXT,
        passed INTEGER NOT NULL,
        result TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (eval_id, task_id)
    )""",
    "CREATE INDEX eval_tasks_by_conversation ON eval_tasks (conversation_id)",
)
"""Plain SQL both backends take (text timestamps: ISO 8601 in UTC sort as they read)."""

EPOCHS_AND_INPUTS = (
    "ALTER TABLE eval_runs ADD COLUMN inputs_sha256 TEXT NOT NULL DEFAULT ''",
    """CREATE TABLE eval_tasks_v2 (
        eval_id TEXT NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
        task_id TEXT NOT NULL,
        epoch INTEGER NOT NULL DEFAULT 1,
        position INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'done', 'not_run')),
        attempts INTEGER NOT NULL,
        conversation_id TEXT,
        passed INTEGER NOT NULL,
        result TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (eval_id, task_id, epoch)
    )""",
    "INSERT INTO eval_tasks_v2 (eval_id, task_id, epoch, position, state, attempts, "
    "conversation_id, passed, result, updated_at) SELECT eval_id, task_id, 1, position, state, "
    "attempts, conversation_id, passed, result, updated_at FROM eval_tasks",
    "DROP TABLE eval_tasks",
    "ALTER TABLE eval_tasks_v2 RENAME TO eval_tasks",
    "CREATE INDEX eval_tasks_by_conversation ON eval_tasks (conversation_id)",
)
"""Version 2: one row per task and epoch (``--epochs``), and the digest of the eval's inputs.
A table rebuild, as SQLite cannot change a primary key in place (both backends take it)."""

EVAL_MIGRATIONS: list[tuple[str, ...]] = [EVAL_TABLES, EPOCHS_AND_INPUTS]
"""``EVAL_MIGRATIONS[v]`` upgrades the eval tables from version v to v + 1. Append new ones;
never edit a released one."""
EVAL_VERSION_KEY = "eval_schema_version"


def _newer_error(found: int) -> StoreError:
    return StoreError(
        f"this store's eval tables were written by a newer Treadle (eval schema version "
        f"{found}, this Treadle knows up to {len(EVAL_MIGRATIONS)}); upgrade Treadle"
    )


class SqliteEvalResults(_SqlResults):
    """The eval tables of a SQLite store (its own connection to the store's file)."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        try:
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT value FROM meta WHERE key = ?", (EVAL_VERSION_KEY,)
                ).fetchone()
                version = int(row[0]) if row else 0
                if version > len(EVAL_MIGRATIONS):
                    raise _newer_error(version)
                for statements in EVAL_MIGRATIONS[version:]:
                    for statement in statements:
                        self._conn.execute(statement)
                self._conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                    "SET value = excluded.value",
                    (EVAL_VERSION_KEY, str(len(EVAL_MIGRATIONS))),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            self._conn.close()
            raise StoreError(f"cannot open the eval tables of {path}: {error}") from None
        except BaseException:
            self._conn.close()
            raise

    def _execute(self, query: str, params: Sequence[Any] = ()) -> None:
        try:
            self._conn.execute(self._sql(query), tuple(params))
        except sqlite3.Error as error:
            raise StoreError(f"eval tables: {error}") from None

    def _rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self._conn.execute(self._sql(query), tuple(params)).fetchall())
        except sqlite3.Error as error:
            raise StoreError(f"eval tables: {error}") from None

    def close(self) -> None:
        self._conn.close()


class PostgresEvalResults(_SqlResults):
    """The eval tables of a PostgreSQL store, in the store's schema."""

    placeholder = "%s"

    def __init__(self, url: str) -> None:
        import psycopg

        from treadle.store.postgres_schema import connect, parse_postgres_url

        conninfo, schema, durability = parse_postgres_url(url)
        self._conn = connect(conninfo, schema, durability, "eval")
        self._psycopg = psycopg
        try:
            with self._conn.transaction():
                self._conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"treadle-eval:{schema}",)
                )
                row = self._conn.execute(
                    "SELECT value FROM meta WHERE key = %s", (EVAL_VERSION_KEY,)
                ).fetchone()
                version = int(row[0]) if row else 0
                if version > len(EVAL_MIGRATIONS):
                    raise _newer_error(version)
                for statements in EVAL_MIGRATIONS[version:]:
                    for statement in statements:
                        self._conn.execute(statement.encode())
                self._conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                    "SET value = excluded.value",
                    (EVAL_VERSION_KEY, str(len(EVAL_MIGRATIONS))),
                )
        except psycopg.Error as error:
            self._conn.close()
            raise StoreError(f"cannot open the eval tables of {url}: {error}") from None
        except BaseException:
            self._conn.close()
            raise

    def _execute(self, query: str, params: Sequence[Any] = ()) -> None:
        try:
            self._conn.execute(self._sql(query).encode(), tuple(params))
        except self._psycopg.Error as error:
            raise StoreError(f"eval tables: {error}") from None

    def _rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self._conn.execute(self._sql(query).encode(), tuple(params)).fetchall())
        except self._psycopg.Error as error:
            raise StoreError(f"eval tables: {error}") from None

    def close(self) -> None:
        self._conn.close()


def open_eval_results(url: str) -> EvalResults:
    """The eval tables of the store at ``url`` (the store itself must have been opened once,
    e.g. by ``open_store``, so that it exists at its current schema)."""
    from urllib.parse import urlsplit

    from treadle.store.urls import sqlite_path_and_options

    scheme = urlsplit(url).scheme.split("+", 1)[0].lower()
    if scheme == "sqlite":
        path, _options = sqlite_path_and_options(url)
        return SqliteEvalResults(str(path))
    if scheme in ("postgresql", "postgres"):
        return PostgresEvalResults(url)
    raise StoreError(f"evals need a sqlite:/// or postgresql:// store, not {url!r}")
