"""PostgreSQL appends against raw psycopg doing the same writes, in the same run.

The PostgreSQL counterpart of ``treadle bench store``'s raw-sqlite3 gate: raw psycopg inserts the
event row and updates the conversation row, one transaction each (the writes of an append, every
value computed beforehand), and Treadle's ``append`` runs on the same server in alternating chunks,
so both meet the same moments of the machine's load.

    .venv/bin/python bench/postgres_raw_appends.py [--store URL] [--events N]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from treadle.bench.workload import realistic_events
from treadle.events.model import Event
from treadle.store.append_plan import plan_append
from treadle.store.postgres import MIGRATIONS, PostgresEventStore, parse_postgres_url

CHUNK = 500


def _with_schema(url: str, schema: str, durability: str) -> str:
    parts = urlsplit(url)
    query = {**dict(parse_qsl(parts.query)), "schema": schema, "durability": durability}
    return urlunsplit(parts._replace(query=urlencode(query)))


class RawPostgres:
    """One connection, the store's own tables, one transaction per event sent as one message
    (the fewest round trips these writes can take: the floor, not a naive client)."""

    def __init__(self, url: str, durability: str) -> None:
        conninfo, self.schema, _ = parse_postgres_url(url)
        commit = "on" if durability == "durable" else "off"
        self.conn = psycopg.connect(
            conninfo,
            autocommit=True,
            options=f'-c search_path="{self.schema}" -c synchronous_commit={commit}',
        )
        with self.conn.transaction():
            self.conn.execute(f'CREATE SCHEMA "{self.schema}"')
            for statements in MIGRATIONS:
                for statement in statements:
                    self.conn.execute(statement)  # type: ignore[arg-type]
            self.conn.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES ('c', now(), now())"
            )
        self.key = self.conn.execute("SELECT key FROM conversations").fetchone()[0]  # type: ignore[index]
        self.seq = 0

    def append(self, events: list[Event]) -> float:
        planned = plan_append("c", events, next_seq=self.seq, stored={})
        cursor = psycopg.ClientCursor(self.conn)
        start = time.perf_counter()
        for item in planned:
            cursor.execute(
                "BEGIN; INSERT INTO events (conversation, seq, id, parent_seq, branch, kind, "
                "source, time_us, payload) VALUES (%s, %s, %s, %s, 0, %s, %s, %s, %s); "
                "UPDATE conversations SET event_count = %s, head_id = %s, updated_at = now() "
                "WHERE key = %s; COMMIT",
                (
                    self.key,
                    item.seq,
                    item.event.id,
                    item.parent_seq,
                    item.event.kind,
                    item.event.source,
                    item.time_us,
                    item.payload,
                    item.seq + 1,
                    item.event.id,
                    self.key,
                ),
            )
        self.seq += len(planned)
        return time.perf_counter() - start

    def drop(self) -> None:
        self.conn.execute(f'DROP SCHEMA "{self.schema}" CASCADE')
        self.conn.close()


def measure(url: str, durability: str, count: int) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    store_url = _with_schema(url, f"treadle_bench_store_{tag}", durability)
    store = PostgresEventStore(store_url)
    raw = RawPostgres(_with_schema(url, f"treadle_bench_raw_{tag}", durability), durability)
    treadle_s = raw_s = 0.0
    try:
        store.create_conversation("c")
        for start in range(0, count, CHUNK):
            events = realistic_events(CHUNK, seed=start)
            raw_s += raw.append(events)
            began = time.perf_counter()
            for event in events:
                store.append("c", event)
            treadle_s += time.perf_counter() - began
    finally:
        raw.drop()
        with psycopg.connect(parse_postgres_url(url)[0], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{store.schema}" CASCADE')
        store.close()
    done = (count + CHUNK - 1) // CHUNK * CHUNK
    return {
        f"append_{durability}_per_s": round(done / treadle_s),
        f"raw_postgres_{durability}_per_s": round(done / raw_s),
        f"raw_{durability}_over_treadle": round(treadle_s / raw_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    figures = {"backend": "postgres", "events": args.events}
    for durability in ("durable", "fast"):
        figures.update(measure(args.store, durability, args.events))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
