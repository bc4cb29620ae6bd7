"""The listing reads conversations in creation order through an index (a schema step on both
backends), so a page no longer sorts every conversation of the store; a store made before the
step gets the index when opened, and lists as it did."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.postgres import fresh_schema_url
from support.schema_rewind import postgres_back_to, sqlite_back_to
from treadle.store import postgres_schema, sqlite_schema
from treadle.store.conversation_rows import LISTING_INDEX, sqlite_add_listing_index
from treadle.store.urls import open_store

LISTING = "SELECT id FROM conversations ORDER BY created_at, key LIMIT 50 OFFSET 100"


def _fill(url: str) -> list[str]:
    with open_store(url) as store:
        return [store.create_conversation(f"c{n:03}").id for n in range(300)]


def _listed(url: str) -> list[str]:
    with open_store(url) as store:
        return [info.id for info in store.list_conversations(limit=1000)]


def test_sqlite_lists_by_the_index_after_opening_an_older_store(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    made = _fill(url)
    before = sqlite_schema.MIGRATIONS.index(sqlite_add_listing_index)
    sqlite_back_to(path, before, ["DROP INDEX conversations_by_creation"])
    assert _listed(url) == made  # oldest first, as before the step
    assert sqlite_schema.read_schema_version(path) == sqlite_schema.schema_version()
    with open_store(url) as store, store._lent() as conn:  # the store's own connection
        plan = conn.execute(f"EXPLAIN QUERY PLAN {LISTING}").fetchall()
    assert "USING INDEX conversations_by_creation" in str(plan)
    assert "TEMP B-TREE" not in str(plan)  # no sort of every conversation


@pytest.mark.postgres
def test_postgres_lists_by_the_index_after_opening_an_older_store() -> None:
    with fresh_schema_url() as url:
        made = _fill(url)
        before = postgres_schema.MIGRATIONS.index((LISTING_INDEX,))
        postgres_back_to(url, before, ["DROP INDEX conversations_by_creation"])
        assert _listed(url) == made
        with open_store(url) as store, store._pool.connection() as conn:  # its session settings
            conn.execute("ANALYZE conversations")
            plan = conn.execute(f"EXPLAIN {LISTING}").fetchall()
        shown = "\n".join(row[0] for row in plan)
        assert "conversations_by_creation" in shown
        assert "Sort" not in shown
