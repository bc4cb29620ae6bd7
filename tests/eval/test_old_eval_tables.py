"""A store whose eval tables were made by the old eval layer (its own tables and migrations,
their version as ``eval_schema_version`` in ``meta``, before the store's migrations made
them) opens with its evals, on SQLite and PostgreSQL: from version 1 (no epochs, no inputs
digest) and version 2 (the last it wrote). Its eval reads back as stored and resumes (the
finished task skipped, the other run), and ``meta`` keeps one version, the store's. An old
version this Treadle does not know is refused, the store left as it was."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from support.eval_tasks import EXPECTED, InProcessEngine, write_eval
from support.postgres import POSTGRES_BASE_URL, fresh_schema_url
from treadle.eval.driver import EvalPlan, model_settings, run_eval
from treadle.eval.tasks import TaskFile, read_task_file
from treadle.store import postgres_schema, sqlite_schema
from treadle.store.base import StoreError
from treadle.store.eval_results import open_eval_results
from treadle.store.eval_tables import postgres_add_eval_tables, sqlite_add_eval_tables
from treadle.store.urls import open_store

# What the old eval layer ran: its version 1 tables, then its step to version 2.
OLD_VERSION_1 = (
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
OLD_1_TO_2 = (
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
OLD_RESULT = {"task_id": "sed-fix", "status": "finished", "passed": True, "attempts": 1}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param == "sqlite":
        yield "sqlite", f"sqlite:///{tmp_path / 'old.db'}"
    else:
        with fresh_schema_url() as url:
            yield "postgres", url


def _raw(kind: str, url: str, statements: list[str]) -> None:
    """Run SQL on the store's database as it is, outside Treadle."""
    if kind == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            for statement in statements:
                conn.execute(statement)
        finally:
            conn.close()
        return
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(
        POSTGRES_BASE_URL, autocommit=True, options=f"-c search_path={schema}"
    ) as pg:
        for statement in statements:
            pg.execute(statement.encode())


def _meta(kind: str, url: str) -> dict[str, str]:
    if kind == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return dict(conn.execute("SELECT key, value FROM meta").fetchall())
        finally:
            conn.close()
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(POSTGRES_BASE_URL, options=f"-c search_path={schema}") as pg:
        return dict(pg.execute("SELECT key, value FROM meta").fetchall())


def _store_before_eval_tables(kind: str, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store as the Treadle before the eval tables' step made it: the steps before it (a
    released prefix: steps added since come after it)."""
    if kind == "sqlite":
        steps = sqlite_schema.MIGRATIONS
        released = steps[: steps.index(sqlite_add_eval_tables)]
        monkeypatch.setattr(sqlite_schema, "MIGRATIONS", released)
    else:
        pg_steps = postgres_schema.MIGRATIONS
        released_pg = pg_steps[: pg_steps.index((postgres_add_eval_tables,))]
        monkeypatch.setattr(postgres_schema, "MIGRATIONS", released_pg)
        monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", len(released_pg))
    open_store(url).close()
    monkeypatch.undo()


def _old_eval(
    kind: str, url: str, version: int, task_file: TaskFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old eval layer's tables at ``version``, with eval ``old``: its first task done."""
    _store_before_eval_tables(kind, url, monkeypatch)
    settings = json.dumps(model_settings(None), sort_keys=True)
    task_ids = json.dumps([task.id for task in task_file.tasks])
    result = json.dumps(OLD_RESULT).replace("'", "''")
    run = (
        f"'old', '{task_file.path}', '{task_file.sha256}', '{settings}', '{{}}', '{task_ids}', "
        "'2026-01-01T00:00:00.000+00:00', '2026-01-01T00:00:00.000+00:00'"
    )
    statements = list(OLD_VERSION_1)
    if version == 1:
        statements += [
            f"INSERT INTO eval_runs VALUES ({run})",
            "INSERT INTO eval_tasks VALUES ('old', 'sed-fix', 0, 'done', 1, 'c-old', 1, "
            f"'{result}', '2026-01-01T00:00:01.000+00:00')",
        ]
    else:
        statements += [
            *OLD_1_TO_2,
            f"INSERT INTO eval_runs VALUES ({run}, 'inputs-digest')",
            "INSERT INTO eval_tasks VALUES ('old', 'sed-fix', 1, 0, 'done', 1, 'c-old', 1, "
            f"'{result}', '2026-01-01T00:00:01.000+00:00')",
        ]
    statements.append(f"INSERT INTO meta (key, value) VALUES ('eval_schema_version', '{version}')")
    _raw(kind, url, statements)


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_eval_layers_store_opens_reads_and_resumes_its_eval(
    backend: tuple[str, str], version: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, url = backend
    task_file = read_task_file(write_eval(tmp_path / "eval", EXPECTED[:2]))
    _old_eval(kind, url, version, task_file, monkeypatch)
    assert _meta(kind, url)["eval_schema_version"] == str(version)
    open_eval_results(url).close()  # brings the store, and with it the eval tables, up
    meta = _meta(kind, url)
    store = open_store(url)
    results = open_eval_results(url)
    try:
        assert "eval_schema_version" not in meta
        current = (
            sqlite_schema.schema_version() if kind == "sqlite" else len(postgres_schema.MIGRATIONS)
        )
        assert meta["schema_version"] == str(current)
        record = results.get_eval("old")
        assert (record.tasks_sha256, record.task_ids) == (
            task_file.sha256,
            ("sed-fix", "editor-fix"),
        )
        assert record.inputs_sha256 == ("" if version == 1 else "inputs-digest")
        (row,) = results.tasks("old")
        assert (row.task_id, row.epoch, row.state, row.passed) == ("sed-fix", 1, "done", True)
        assert (row.conversation_id, row.result) == ("c-old", OLD_RESULT)
        assert results.results_of("c-old") == [("old", "sed-fix", 1)]
        assert [one.id for one in results.list_evals()] == ["old"]

        plan = EvalPlan(
            "old", task_file, None, url, inputs_sha256="" if version == 1 else "inputs-digest"
        )
        run = run_eval(plan, InProcessEngine(), results, store)
        assert run.skipped == {"sed-fix"}
        rows = {row.task_id: row for row in run.tasks}
        assert rows["sed-fix"].result == OLD_RESULT  # kept, not run again
        assert (rows["editor-fix"].state, rows["editor-fix"].passed) == ("done", True)
        assert rows["editor-fix"].conversation_id in {
            info.id for info in store.list_conversations()
        }
        results.start_attempt("old", "sed-fix", 0, "c-epoch-2", epoch=2)  # epochs work too
        assert [(r.task_id, r.epoch) for r in results.tasks("old")] == [
            ("sed-fix", 1),
            ("sed-fix", 2),
            ("editor-fix", 1),
        ]
    finally:
        results.close()
        store.close()


def test_an_old_eval_version_this_treadle_does_not_know_is_refused(
    backend: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, url = backend
    task_file = read_task_file(write_eval(tmp_path / "eval", EXPECTED[:1]))
    _old_eval(kind, url, 2, task_file, monkeypatch)
    _raw(kind, url, ["UPDATE meta SET value = '3' WHERE key = 'eval_schema_version'"])
    before = _meta(kind, url)
    with pytest.raises(StoreError, match="eval_schema_version '3'"):
        open_store(url)
    with pytest.raises(StoreError, match="eval_schema_version '3'"):
        open_eval_results(url)
    assert _meta(kind, url) == before  # the failed migration changed nothing
