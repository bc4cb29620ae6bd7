"""Fixtures for the store contract suite: every test runs against SQLite and PostgreSQL.

PostgreSQL is the server at 127.0.0.1:5432 (database ``test``); each test gets a fresh schema.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from treadle.store.base import EventStore
from treadle.store.urls import open_store

POSTGRES_BASE_URL = os.environ.get(
    "TREADLE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    schema = f"treadle_test_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES_BASE_URL}?schema={schema}"
    _drop_schema(schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request) -> str:
    """A URL to a fresh, empty store of each backend."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def store(store_url) -> Iterator[EventStore]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.close()
