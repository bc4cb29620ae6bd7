"""Fixtures for the store contract suite: every test runs against SQLite and PostgreSQL.

PostgreSQL is ``tests.support.postgres.POSTGRES_BASE_URL``; each test gets a fresh schema.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.postgres import fresh_schema_url
from treadle.store.base import EventStore
from treadle.store.urls import open_store


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_schema_url() as url:
        yield url


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
