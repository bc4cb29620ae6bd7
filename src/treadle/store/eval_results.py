"""The eval tables of a store (made by its migrations: ``eval_tables.py``) and the typed API
that reads and writes them: ``open_eval_results(url)`` gives an ``EvalResults`` on the store's
own file or schema, the way ``leases.open_leases`` gives its run leases.

Rows only: what an eval's states mean, and when an eval id may be resumed, is the eval's
(``treadle.eval.results``, which names these records for its users). The records are defined
here because the store imports nothing above ``events``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote, urlsplit

from treadle.errors import TreadleError
from treadle.store.base import StoreError
from treadle.store.sqlite import sqlite_errors

TaskState = Literal["running", "done", "not_run"]
"""``running``: an attempt was handed to a worker; ``done``: a result is stored;
``not_run``: no result after its retries."""

_BUSY_TIMEOUT_S = 30.0


class EvalNotFound(TreadleError):
    def __init__(self, eval_id: str) -> None:
        self.eval_id = eval_id
        super().__init__(f"no eval {eval_id!r} in this store")


@dataclass(frozen=True)
class EvalRecord:
    """An eval's row: what it was made from and the engine of its last run."""

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
    """One task's row, at one epoch of an eval."""

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


def now_text() -> str:
    """A row's timestamp: ISO 8601 in UTC, which sorts as it reads."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class EvalResults(Protocol):
    """The eval tables of one store."""

    def add_eval(self, record: EvalRecord) -> EvalRecord:
        """Store ``record`` unless an eval of its id is stored; the stored eval either way."""
        ...

    def set_engine(self, eval_id: str, engine: dict[str, Any]) -> EvalRecord:
        """Record the engine of the eval's latest run; the eval as now stored."""
        ...

    def get_eval(self, eval_id: str) -> EvalRecord:
        """The eval ``eval_id``; EvalNotFound when the store has none of that id."""
        ...

    def list_evals(self, *, limit: int = 100, offset: int = 0) -> list[EvalRecord]:
        """The evals, newest first."""
        ...

    def tasks(self, eval_id: str) -> list[TaskRecord]:
        """The eval's task rows in the task file's order, each task's epochs in order."""
        ...

    def results_of(self, conversation_id: str) -> list[tuple[str, str, int]]:
        """The (eval id, task id, epoch) whose last attempt ``conversation_id`` is."""
        ...

    def start_attempt(
        self, eval_id: str, task_id: str, position: int, conversation_id: str, epoch: int = 1
    ) -> int:
        """Record that an attempt at the task's ``epoch`` was handed to a worker (state
        ``running``, its result cleared); the attempt's number."""
        ...

    def finish(self, eval_id: str, task_id: str, result: dict[str, Any], epoch: int = 1) -> None:
        """Store the attempt's result (state ``done``)."""
        ...

    def give_up(self, eval_id: str, task_id: str, result: dict[str, Any], epoch: int = 1) -> None:
        """Store why the task has no result (state ``not_run``)."""
        ...

    def close(self) -> None: ...


_EVAL_COLUMNS = (
    "id, tasks_file, tasks_sha256, settings, engine, task_ids, created_at, updated_at, "
    "inputs_sha256"
)
_TASK_COLUMNS = (
    "eval_id, task_id, position, state, attempts, conversation_id, passed, result, updated_at, "
    "epoch"
)


class _SqlResults:
    """The queries, written once with ``?`` placeholders; a backend runs them."""

    placeholder = "?"

    def _execute(self, query: str, params: Sequence[Any] = (), *, repeatable: bool) -> None:
        """Run a write. ``repeatable``: running it twice leaves what running it once does, so
        a backend may run it again on a fresh connection after losing one."""
        raise NotImplementedError

    def _rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _sql(self, query: str) -> str:
        return query.replace("?", self.placeholder)

    def _has_meta(self) -> bool:
        raise NotImplementedError

    def store_version(self) -> int:
        """The store's schema version (0: no store there yet, or not a Treadle store: opening
        it as a store then says why)."""
        if not self._has_meta():
            return 0
        rows = self._rows("SELECT value FROM meta WHERE key = 'schema_version'")
        return int(rows[0][0]) if rows and str(rows[0][0]).isdigit() else 0

    def add_eval(self, record: EvalRecord) -> EvalRecord:
        self._execute(
            f"INSERT INTO eval_runs ({_EVAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
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
            repeatable=True,
        )
        return self.get_eval(record.id)

    def set_engine(self, eval_id: str, engine: dict[str, Any]) -> EvalRecord:
        self._execute(
            "UPDATE eval_runs SET engine = ?, updated_at = ? WHERE id = ?",
            (json.dumps(engine, sort_keys=True), now_text(), eval_id),
            repeatable=True,
        )
        return self.get_eval(eval_id)

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
            f"SELECT {_TASK_COLUMNS} FROM eval_tasks WHERE eval_id = ? ORDER BY position, epoch",
            (eval_id,),
        )
        return [_task_record(row) for row in rows]

    def results_of(self, conversation_id: str) -> list[tuple[str, str, int]]:
        rows = self._rows(
            "SELECT eval_id, task_id, epoch FROM eval_tasks WHERE conversation_id = ? "
            "ORDER BY eval_id, position, epoch",
            (conversation_id,),
        )
        return [(row[0], row[1], int(row[2])) for row in rows]

    def start_attempt(
        self, eval_id: str, task_id: str, position: int, conversation_id: str, epoch: int = 1
    ) -> int:
        self._execute(
            "INSERT INTO eval_tasks (eval_id, task_id, epoch, position, state, attempts, "
            "conversation_id, passed, result, updated_at) VALUES (?, ?, ?, ?, 'running', 1, ?, "
            "0, NULL, ?) ON CONFLICT (eval_id, task_id, epoch) DO UPDATE SET state = 'running', "
            "attempts = eval_tasks.attempts + 1, conversation_id = excluded.conversation_id, "
            "passed = 0, result = NULL, updated_at = excluded.updated_at",
            (eval_id, task_id, epoch, position, conversation_id, now_text()),
            repeatable=False,  # a second run would count the attempt twice
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
        self, eval_id: str, task_id: str, epoch: int, state: TaskState, result: dict[str, Any]
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
            repeatable=True,
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


def _task_record(row: tuple[Any, ...]) -> TaskRecord:
    return TaskRecord(
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


class SqliteEvalResults(_SqlResults):
    """The eval tables of a SQLite store: a connection of its own to the store's file, used
    by one thread at a time."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)
        try:
            # mode=rw: the store's file must exist (open_eval_results opens the store first)
            self._conn = sqlite3.connect(
                f"file:{quote(path)}?mode=rw",
                uri=True,
                timeout=_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as error:
            raise StoreError(
                f"cannot open the eval tables of store {path} ({error}); open the store first"
            ) from None
        self._lock = threading.Lock()
        with self._lock, sqlite_errors(self._path, busy_timeout=_BUSY_TIMEOUT_S):
            self._conn.execute("PRAGMA foreign_keys = ON")

    def _execute(self, query: str, params: Sequence[Any] = (), *, repeatable: bool) -> None:
        with self._lock, sqlite_errors(self._path, busy_timeout=_BUSY_TIMEOUT_S):
            self._conn.execute(self._sql(query), tuple(params))

    def _rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock, sqlite_errors(self._path, busy_timeout=_BUSY_TIMEOUT_S):
            return list(self._conn.execute(self._sql(query), tuple(params)).fetchall())

    def _has_meta(self) -> bool:
        return bool(
            self._rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'")
        )

    def close(self) -> None:
        self._conn.close()


class PostgresEvalResults(_SqlResults):
    """The eval tables of a PostgreSQL store, in the store's schema, through a pool of their
    own (application_name ``treadle-eval:<schema>``): a lost connection is replaced."""

    placeholder = "%s"

    def __init__(self, url: str) -> None:
        # lazily: psycopg is only needed by those who use PostgreSQL
        from treadle.store.postgres_schema import parse_postgres_url
        from treadle.store.postgres_sessions import DEFAULT_RECONNECT_S, Pool, connect

        conninfo, schema, durability = parse_postgres_url(url)
        self._pool = Pool(
            lambda: connect(conninfo, schema, durability, "eval"),
            reconnect_s=DEFAULT_RECONNECT_S,
        )

    def _execute(self, query: str, params: Sequence[Any] = (), *, repeatable: bool) -> None:
        def run() -> None:
            with self._pool.connection() as conn:
                conn.execute(self._sql(query).encode(), tuple(params))

        if repeatable:
            self._pool.retry(run)
        else:
            run()

    def _rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        def run() -> list[tuple[Any, ...]]:
            with self._pool.connection() as conn:
                return list(conn.execute(self._sql(query).encode(), tuple(params)).fetchall())

        return self._pool.retry(run)

    def _has_meta(self) -> bool:
        return bool(self._rows("SELECT 1 WHERE to_regclass('meta') IS NOT NULL"))

    def close(self) -> None:
        self._pool.close()


def open_eval_results(url: str) -> EvalResults:
    """The eval tables of the store at ``url`` (sqlite:/// or postgresql://). A store not yet
    at this Treadle's schema (one made before the eval tables were the store's, or none) is
    opened first, so that its migrations make or bring up to date the eval tables."""
    from treadle.store.urls import open_store, sqlite_path_and_options

    scheme = urlsplit(url).scheme.split("+", 1)[0].lower()
    make: Callable[[], _SqlResults]
    if scheme == "sqlite":
        from treadle.store.sqlite_schema import schema_version

        path, _options = sqlite_path_and_options(url)
        if not Path(path).exists():
            open_store(url).close()
        current = schema_version()
        make = partial(SqliteEvalResults, str(path))
    elif scheme in ("postgresql", "postgres"):
        from treadle.store.postgres_schema import SCHEMA_VERSION

        current = SCHEMA_VERSION
        make = partial(PostgresEvalResults, url)
    else:
        raise StoreError(f"evals need a sqlite:/// or postgresql:// store, not {url!r}")
    # The version is read on this connection, not with sqlite_schema.read_schema_version:
    # its immutable connection, once closed, drops the POSIX locks that the other connections
    # of this process (the store the caller has open) hold on the file; another process's
    # connection then closes as the last one and deletes the WAL under them (an eval run's
    # store was damaged that way).
    results = make()
    try:
        behind = results.store_version() < current
    except BaseException:
        results.close()
        raise
    if not behind:
        return results
    results.close()
    open_store(url).close()
    return make()


__all__ = [
    "EvalNotFound",
    "EvalRecord",
    "EvalResults",
    "PostgresEvalResults",
    "SqliteEvalResults",
    "TaskRecord",
    "TaskState",
    "now_text",
    "open_eval_results",
]
