"""The PostgreSQL server the tests use: ``$TREADLE_TEST_POSTGRES`` (set by ``make test`` when it
starts a private server), else the machine's own at 127.0.0.1:5432, database ``test``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

POSTGRES_BASE_URL = os.environ.get(
    "TREADLE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def fresh_schema_url(prefix: str = "treadle_test") -> Iterator[str]:
    """A store URL on a schema of its own, dropped afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{POSTGRES_BASE_URL}?schema={schema}"
    finally:
        drop_schema(schema)


def backends(store_url: str, role: str = "%") -> int:
    """Live PostgreSQL connections of a store on its schema, by the application name the store
    gives them (``treadle-<role>:<schema>``; role ``store``, ``subscribe``, ``leases``, or ``%``
    for all)."""
    import psycopg

    schema = store_url.split("schema=")[1].split("&")[0]
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"treadle-{role}:{schema}",),
        ).fetchone()
    return row[0] if row else 0
