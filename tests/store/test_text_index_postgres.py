"""The PostgreSQL text index (treadle.store.postgres_text): a pg_trgm GIN index that text
filters use, made for new stores and for stores of the schema before it; searches equal the
scan (the index is rechecked by PostgreSQL itself); without pg_trgm the store still works,
scanning, and says so in the log."""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from support.postgres import POSTGRES_BASE_URL, fresh_schema_url
from support.schema_rewind import postgres_back_to
from treadle.events.model import ROOT, MessageEvent
from treadle.store import postgres_schema
from treadle.store.base import EventQuery
from treadle.store.urls import open_store

pytestmark = pytest.mark.postgres

TEXTS = ['Needle "quoted" here', "nothing", "NEEDLE\\back", "héllo NeEdLe", "İstanbul ned"]


def _schema(url: str) -> str:
    return url.split("schema=")[1].split("&")[0]


def _index_exists(url: str) -> bool:
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexname = 'events_text'",
            (_schema(url),),
        ).fetchone()
    return bool(row and row[0])


def _fill(url: str) -> None:
    with open_store(url) as store:
        store.create_conversation("c")
        parent = ROOT
        for index, text in enumerate(TEXTS * 3):
            store.append(
                "c", MessageEvent(id=f"e{index}", source="user", text=text, parent_id=parent)
            )
            parent = f"e{index}"


def _seqs(url: str, needle: str, **options: object) -> list[int]:
    with open_store(url) as store:
        return [i.seq for i in store.search("c", EventQuery(text=needle, **options)).items]  # type: ignore[arg-type]


def test_text_filters_use_the_index_and_equal_the_scan() -> None:
    with fresh_schema_url() as url:
        _fill(url)
        assert _index_exists(url)
        expected = [i for i, text in enumerate(TEXTS * 3) if "needle" in text.lower()]
        assert _seqs(url, "nEEdle") == expected
        assert _seqs(url, "nEEdle", order="desc", limit=2) == expected[::-1][:2]
        assert _seqs(url, '"quoted"') == []  # stored as \"quoted\" in the JSON
        assert _seqs(url, '\\"quoted\\"') == [0, 5, 10]
        assert _seqs(url, "HÉLLO") == [3, 8, 13]
        assert _seqs(url, "ne") == [i for i, t in enumerate(TEXTS * 3) if "ne" in t.lower()]
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{_schema(url)}"')
            conn.execute("SET enable_seqscan = off")
            plan = "\n".join(
                row[0]
                for row in conn.execute(
                    "EXPLAIN SELECT seq FROM events WHERE payload ~* '***=needle'"
                )
            )
        assert "events_text" in plan, plan


def test_a_store_of_the_schema_before_the_index_gets_it_when_opened() -> None:
    with fresh_schema_url() as url:
        # Back to the schema before the index: the index gone, the version before its step
        # (the steps after it run again, as they may).
        at = next(
            n for n, m in enumerate(postgres_schema.MIGRATIONS) if postgres_schema._text_index in m
        )
        _fill(url)
        postgres_back_to(url, at, ["DROP INDEX events_text"])
        assert not _index_exists(url)
        assert _seqs(url, "needle", limit=3) == [0, 2, 3]  # opening migrates
        assert _index_exists(url)
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT value FROM \"{_schema(url)}\".meta WHERE key = 'schema_version'"
            ).fetchone()
        assert row is not None
        assert int(row[0]) == len(postgres_schema.MIGRATIONS)


@pytest.fixture
def database_without_trgm() -> Iterator[str]:
    """A URL to a store schema in a fresh database where pg_trgm cannot be created: it has
    no ``public`` schema, where the store would create the extension."""
    suffix = uuid.uuid4().hex[:10]
    database, role, schema = f"treadle_notrgm_{suffix}", f"treadle_r_{suffix}", "store"
    parts = urlsplit(POSTGRES_BASE_URL)
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    admin_url = urlunsplit(parts._replace(path=f"/{database}"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public")
        conn.execute(f'GRANT CREATE ON DATABASE "{database}" TO "{role}"')
    netloc = f"{role}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    try:
        yield urlunsplit(parts._replace(netloc=netloc, path=f"/{database}")) + f"?schema={schema}"
    finally:
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_without_pg_trgm_the_store_scans_and_says_so(
    database_without_trgm: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = database_without_trgm
    with caplog.at_level(logging.WARNING, logger="treadle.store.postgres_text"):
        _fill(url)
        assert _seqs(url, "needle") == [i for i, t in enumerate(TEXTS * 3) if "needle" in t.lower()]
    assert not _index_exists_in(url)
    assert any("pg_trgm" in record.getMessage() for record in caplog.records)


def _index_exists_in(url: str) -> bool:
    dsn = url.split("?")[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('store.events_text') IS NOT NULL").fetchone()
    return bool(row and row[0])


def test_every_step_of_a_text_page_equals_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random queries on a branched log, with a probe and a cap small enough that pages end
    in each of the three steps (probe, index matches, ordered rest): pages and counts equal
    those of the same store scanning."""
    from treadle.store import postgres

    monkeypatch.setattr(postgres, "ORDERED_PROBE", 3)
    monkeypatch.setattr(postgres, "TEXT_INDEX_CAP", 4)
    outcomes: list[str] = []
    index_matches = postgres.PostgresEventStore._index_matches

    def counted_matches(*args: Any, **kwargs: Any) -> list[tuple[int, str]] | None:
        found = index_matches(*args, **kwargs)
        outcomes.append("over the cap" if found is None else "from the index")
        return found

    monkeypatch.setattr(
        postgres.PostgresEventStore, "_index_matches", staticmethod(counted_matches)
    )
    rng = random.Random(11)
    words = ["Alpha", "beta", "GAMMA", "délta", 'q"uote', "back\\slash", "zz"]
    with fresh_schema_url() as url, open_store(url) as store:
        store.create_conversation("c")
        ids: list[str] = []
        for index in range(80):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 3)))
            parent = ids[-1] if ids and rng.random() < 0.8 else rng.choice(ids or [ROOT])
            store.append(
                "c", MessageEvent(id=f"e{index}", source="user", text=text, parent_id=parent)
            )
            ids.append(f"e{index}")
        assert isinstance(store, postgres.PostgresEventStore)
        heads = [None, store.head("c"), *rng.sample(ids, 3)]
        for _ in range(60):
            query = EventQuery(
                text=rng.choice(
                    ["alpha", "BETA", "gamma", "délta", '"uote', "\\\\sl", "zz", "nope"]
                ),
                order=rng.choice(["asc", "desc"]),
                limit=rng.randint(1, 6),
                after_seq=rng.choice([None, rng.randint(-1, 80)]),
                before_seq=rng.choice([None, rng.randint(0, 81)]),
                branch_head=rng.choice(heads),
            )
            store._text_index = True
            page = store.search("c", query)
            counted = store.count("c", query)
            store._text_index = False
            assert store.search("c", query) == page, query
            assert store.count("c", query) == counted, query
    # the pages took every way: filled by the probe, by the index, by the ordered rest
    assert 0 < len(outcomes) < 60
    assert {"over the cap", "from the index"} <= set(outcomes)
