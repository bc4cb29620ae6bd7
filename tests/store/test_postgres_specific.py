"""What only the PostgreSQL backend has: URL parameters, schema versions and migrations, the
row lock across processes, LISTEN/NOTIFY across processes, closing under a subscriber."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest

from support.postgres import backends
from support.waiting import wait_until
from treadle.errors import AppendError
from treadle.events.model import ROOT, MessageEvent, StateChangeEvent
from treadle.events.tree import EventTree
from treadle.store import postgres_schema
from treadle.store.base import EventQuery, StoreError
from treadle.store.postgres import SCHEMA_VERSION, PostgresEventStore, parse_postgres_url

pytestmark = pytest.mark.postgres


def _schema(url: str) -> str:
    return dict(parse_qsl(urlsplit(url).query))["schema"]


def _admin(url: str) -> psycopg.Connection:
    conninfo, schema, _ = parse_postgres_url(url)
    return psycopg.connect(conninfo, autocommit=True, options=f'-c search_path="{schema}"')


def msg(event_id: str, parent: str | None = None, text: str = "") -> MessageEvent:
    return MessageEvent(id=event_id, source="user", text=text or event_id, parent_id=parent)


def _run_children(script: str, *args: str, count: int) -> list[subprocess.Popen[str]]:
    code = textwrap.dedent(script)
    return [
        subprocess.Popen(
            [sys.executable, "-c", code, *args, str(index)], stdout=subprocess.PIPE, text=True
        )
        for index in range(count)
    ]


# -- URL ------------------------------------------------------------------------------------


def test_url_parameters_are_taken_out_before_connecting():
    conninfo, schema, durability = parse_postgres_url(
        "postgresql://postgres@127.0.0.1:5432/test?schema=abc_1&connect_timeout=5&durability=fast"
    )
    assert (schema, durability) == ("abc_1", "fast")
    assert conninfo == "postgresql://postgres@127.0.0.1:5432/test?connect_timeout=5"
    assert parse_postgres_url("postgres://h/db")[1:] == ("treadle", "durable")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://h/db?schema=x;DROP",
        'postgresql://h/db?schema=a"b',
        "postgresql://h/db?schema=pg_catalog",
        "postgresql://h/db?durability=sometimes",
        "mysql://h/db",
    ],
)
def test_bad_url_parameters_are_refused_with_what_to_do(url):
    with pytest.raises(StoreError, match=r"use|write"):
        parse_postgres_url(url)


def test_schema_from_the_url_is_created_and_reopened(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
    with _admin(postgres_url) as conn:
        tables = {
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (_schema(postgres_url),)
            )
        }
    assert tables == {
        "meta",
        "conversations",
        "events",
        "tree_lines",
        "eval_runs",
        "eval_tasks",
        "audit_checkpoints",
    }
    with PostgresEventStore(postgres_url) as store:
        assert [e.id for e in store.path_to_root("c")] == ["a"]


def test_a_schema_name_that_needs_quoting_works(postgres_url):
    url = postgres_url.replace("treadle_test_", "Treadle-Test-")
    try:
        with PostgresEventStore(url) as store:
            store.create_conversation("c")
            store.append("c", msg("a", ROOT))
        with PostgresEventStore(url) as store:
            assert store.get_conversation("c").event_count == 1
    finally:
        with psycopg.connect(parse_postgres_url(url)[0], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{_schema(url)}" CASCADE')


def test_opening_without_create_never_makes_a_store(postgres_url):
    with pytest.raises(StoreError, match="no Treadle store in schema"):
        PostgresEventStore(postgres_url, create=False)
    with psycopg.connect(parse_postgres_url(postgres_url)[0], autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (_schema(postgres_url),)
        ).fetchone()
    assert row == (0,)
    PostgresEventStore(postgres_url).close()
    PostgresEventStore(postgres_url, create=False).close()


def test_durability_modes_set_synchronous_commit(postgres_url):
    for mode, expected in (("durable", "on"), ("fast", "off")):
        url = f"{postgres_url}&durability={mode}"
        with PostgresEventStore(url) as store, store._pool.connection() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == (expected,)


# -- schema versions ------------------------------------------------------------------------


def test_newer_schema_version_is_refused_and_not_modified(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
    newer = str(SCHEMA_VERSION + 1)
    with _admin(postgres_url) as conn:
        conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (newer,))
    with pytest.raises(StoreError, match=r"newer Treadle.*not modified"):
        PostgresEventStore(postgres_url)
    with _admin(postgres_url) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [
            (newer,)
        ]
        assert conn.execute("SELECT id FROM events").fetchall() == [("a",)]


def test_older_store_is_migrated_forward_keeping_its_events(postgres_url, monkeypatch):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
    step = ("ALTER TABLE conversations ADD COLUMN archived boolean NOT NULL DEFAULT false",)
    monkeypatch.setattr(postgres_schema, "MIGRATIONS", [*postgres_schema.MIGRATIONS, step])
    monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with PostgresEventStore(postgres_url) as store:
        assert [e.id for e in store.path_to_root("c")] == ["a"]
    with _admin(postgres_url) as conn:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version == (str(SCHEMA_VERSION + 1),)
        assert conn.execute("SELECT archived FROM conversations").fetchone() == (False,)


def test_a_schema_holding_other_tables_is_not_taken_over(postgres_url):
    with psycopg.connect(parse_postgres_url(postgres_url)[0], autocommit=True) as conn:
        schema = _schema(postgres_url)
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".invoices (id int)')
    with pytest.raises(StoreError, match="not a Treadle store"):
        PostgresEventStore(postgres_url)


def test_concurrent_first_opens_create_the_schema_once(postgres_url):
    errors: list[BaseException] = []

    def open_once() -> None:
        try:
            PostgresEventStore(postgres_url).close()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_once) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_integrity_check_finds_rows_that_break_the_invariants(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append_batch("c", [msg("a", ROOT), msg("b"), msg("c")])
        assert store.integrity_check() == []
        with _admin(postgres_url) as conn:
            conn.execute("DELETE FROM events WHERE seq = 1")  # a gap
            conn.execute("UPDATE conversations SET head_id = 'ghost'")
        findings = store.integrity_check()
    assert len(findings) == 3, findings
    assert "counts 3 events but holds 2 rows" in findings[0]
    assert "head 'ghost'" in findings[1]
    assert "'c' (seq 2)" in findings[2]


# -- plans that hold before statistics exist -------------------------------------------------

_BAD_PLAN_NODES = {"Seq Scan", "Hash Join", "Merge Join", "Bitmap Heap Scan", "Hash"}


def _plan_nodes(plan: dict) -> list[str]:
    return [plan["Node Type"]] + [n for sub in plan.get("Plans", []) for n in _plan_nodes(sub)]


def test_reads_are_index_probes_even_without_statistics(postgres_url):
    """Before ANALYZE (a new store, or autovacuum off as on this server) the planner once
    hashed a whole conversation at every step of a path walk: 3.5 s for a window at 10^6."""
    from treadle.bench.workload import realistic_events
    from treadle.store.postgres_sessions import connect
    from treadle.store.postgres_sql import PATH_RANGE_SQL, SEGMENTS_SQL, filters_of, page_sql

    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        events = realistic_events(10_000)
        for start in range(0, len(events), 2_000):
            store.append_batch("c", events[start : start + 2_000])
            # a side branch from the last event, then the main chain goes on beside it
            side = MessageEvent(id=f"side{start}", source="user", parent_id=events[start].id)
            store.append("c", side, move_head=False)
        conninfo, schema, durability = parse_postgres_url(postgres_url)
        conn = connect(conninfo, schema, durability, "test")
        try:
            # Make the planner believe in ~10^7 rows, no statistics (the size at which bad
            # plans appeared): it scales reltuples/relpages by the table's real size.
            pages = conn.execute("SELECT pg_relation_size('events') / 8192").fetchone()[0]
            conn.execute(
                "UPDATE pg_class SET reltuples = %s, relpages = 1 WHERE oid = 'events'::regclass",
                (10_000_000 / pages,),
            )
            statements = [
                (SEGMENTS_SQL, {"key": 1, "head": events[-1].id, "floor": -1, "most": 50}),
                (PATH_RANGE_SQL, {"key": 1, "branch": 0, "first": 0, "last": 9999, "limit": 50}),
            ]
            for query in (
                EventQuery(kinds=["message"]),
                EventQuery(kinds=["message", "action"], order="desc", before_seq=20_000),
                EventQuery(sources=["user", "agent"], after_seq=10_000),
                EventQuery(text="branch of"),
            ):
                filters, params = filters_of(query)
                order = query.order.upper()
                statements.append(
                    (page_sql(query, filters, order), {**params, "key": 1, "fetch": 101})
                )
            cursor = psycopg.ClientCursor(conn)
            for statement, params in statements:
                cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
                nodes = _plan_nodes(cursor.fetchone()[0][0]["Plan"])
                assert not _BAD_PLAN_NODES & set(nodes), (statement[:60], nodes)
        finally:
            conn.close()


# -- the row lock across processes ------------------------------------------------------------

_APPENDER = """
    import json, random, sys
    from treadle.errors import AppendError
    from treadle.events.model import MessageEvent
    from treadle.store.postgres import PostgresEventStore
    url, count, worker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    store = PostgresEventStore(url)
    rng = random.Random(worker)
    known = ["r"]
    for n in range(count):
        # explicit parents among events this worker saw, or the legacy rule
        parent = rng.choice([None, *known[-5:]])
        event = MessageEvent(id=f"w{worker}-{n}", source="user", text="x", parent_id=parent)
        seq = store.append("c", event)
        known.append(event.id)
        print(json.dumps([event.id, seq]), flush=True)
    try:  # every worker races for this one id: exactly one may win
        print(json.dumps(["contested", store.append("c", MessageEvent(id="contested", source="user"))]))
    except AppendError as error:
        assert error.contract == "APPEND-DUP-ID", error
    store.close()
"""


def test_processes_appending_concurrently_get_gap_free_unique_seqs(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("r", ROOT))
        children = _run_children(_APPENDER, postgres_url, "300", count=3)
        acknowledged: dict[str, int] = {}
        for child in children:
            out, _ = child.communicate(timeout=300)
            assert child.returncode == 0
            for line in out.splitlines():
                event_id, seq = json.loads(line)
                assert event_id not in acknowledged
                acknowledged[event_id] = seq
        assert sum(1 for event_id in acknowledged if event_id == "contested") == 1
        assert len(acknowledged) == 3 * 300 + 1
        total = 1 + len(acknowledged)
        stored = store.get_range("c", 0, total + 10)
        assert [s.seq for s in stored] == list(range(total))
        assert {s.event.id: s.seq for s in stored[1:]} == acknowledged
        assert store.get_conversation("c").event_count == total
        # every walk ends at the root: no missing parent, no cycle
        for s in stored[-20:]:
            assert store.path_to_root("c", s.event.id)[0].id == "r"


def test_threads_sharing_one_store_append_without_gaps(postgres_url):
    """One store, its pool and its remembered tails shared by threads appending at once."""
    acknowledged: dict[str, int] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(store: PostgresEventStore, worker: int) -> None:
        try:
            own = ["r"]
            for n in range(60):
                parent = [None, own[-1], own[0]][n % 3]  # legacy, a chain, forks from the root
                event = msg(f"t{worker}-{n}", parent)
                batch = [event, msg(f"t{worker}-{n}b", event.id)] if n % 10 == 0 else [event]
                seqs = store.append_batch("c", batch)
                with lock:
                    acknowledged.update(zip([e.id for e in batch], seqs, strict=True))
                own.append(batch[-1].id)
        except BaseException as error:
            errors.append(error)

    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("r", ROOT))
        threads = [threading.Thread(target=work, args=(store, w)) for w in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        stored = store.get_range("c", 0, 10_000)
        assert [s.seq for s in stored] == list(range(len(stored)))
        assert {s.event.id: s.seq for s in stored[1:]} == acknowledged
        tree = EventTree([s.event for s in stored])
        for s in stored:
            expected = [e.id for e in tree.path_to_root(s.event.id)]
            assert [e.id for e in store.path_to_root("c", s.event.id)] == expected
        assert store.integrity_check() == []


def test_a_refused_batch_leaves_nothing_behind(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        with pytest.raises(AppendError) as refused:
            store.append_batch("c", [msg("b", "a"), msg("c", "nowhere")])
        assert refused.value.contract == "APPEND-NO-PARENT"
        assert store.get_conversation("c").event_count == 1
        assert store.head("c") == "a"
        assert store.append("c", msg("b", "a")) == 1  # the seq was not burnt


# -- appends planned from the store's own last append ------------------------------------------


def test_an_append_planned_from_a_stale_tail_is_checked_again(postgres_url):
    """Store ``a`` plans its next append from its own last one; every change by another
    writer in between must make it read the stored facts instead, and write nothing wrong."""
    with PostgresEventStore(postgres_url) as a, PostgresEventStore(postgres_url) as b:
        a.create_conversation("c")
        a.append("c", msg("a1", ROOT))
        # another writer appended: the legacy parent is b's event, at the next seq
        b.append("c", msg("b1"))
        assert a.append("c", msg("a2")) == 2
        assert [e.id for e in a.path_to_root("c")] == ["a1", "b1", "a2"]
        # another writer took the id a is about to use
        b.append("c", msg("x", "a2"))
        with pytest.raises(AppendError) as refused:
            a.append("c", msg("x", "a2"))
        assert refused.value.contract == "APPEND-DUP-ID"
        # another writer moved the head; an append that does not move it must keep it
        b.set_head("c", "b1")
        a.append("c", msg("side", "x"), move_head=False)
        assert a.head("c") == "b1"
        # the conversation was deleted and made again: a must not write under the old one
        a.append("c", msg("a3", "side"))
        b.delete_conversation("c")
        b.create_conversation("c")
        assert a.append("c", msg("fresh")) == 0
        assert [s.event.id for s in b.get_range("c", 0, 10)] == ["fresh"]
        assert b.get_conversation("c").event_count == 1


def test_a_fork_from_an_older_event_keeps_paths_right(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append_batch("c", [msg("r", ROOT), msg("a"), msg("b")])
        store.append("c", msg("b2", "a"))  # a fork: the tail alone cannot say a's tip
        store.append("c", msg("b3", "b"))  # and back on the first branch
        store.append_batch("c", [msg("n", ROOT), msg("n2", "b2")])
        assert [e.id for e in store.path_to_root("c", "b3")] == ["r", "a", "b", "b3"]
        assert [e.id for e in store.path_to_root("c", "n2")] == ["r", "a", "b2", "n2"]
        assert [e.id for e in store.path_to_root("c", "n")] == ["n"]


def _rows(store: PostgresEventStore, conversation_id: str) -> list[tuple[int, str, int, int]]:
    """(seq, id, parent seq, segment) of every stored event, read from the table itself."""
    with psycopg.connect(store._conninfo) as conn:
        conn.execute(f"SET search_path TO {store.schema}")
        return conn.execute(
            "SELECT e.seq, e.id, e.parent_seq, e.branch FROM events e JOIN conversations c "
            "ON c.key = e.conversation WHERE c.id = %s ORDER BY e.seq",
            (conversation_id,),
        ).fetchall()


def _counting_checked_appends(
    store: PostgresEventStore, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """The conversations whose appends took the checked path (a read under the lock first)."""
    checked: list[str] = []
    original = store._append_checked

    def counted(cursor: Any, conversation_id: str, *args: Any) -> list[int]:
        checked.append(conversation_id)
        return original(cursor, conversation_id, *args)

    monkeypatch.setattr(store, "_append_checked", counted)
    return checked


def test_a_step_after_its_snapshot_fact_is_planned_without_a_read(postgres_url, monkeypatch):
    """A run's step: a side leaf (the snapshot fact) under the head, then the model's call and
    its result under the head again, a fork. The tail's recent events say the head's seq and
    its segment's tip: no read before the write, and the segments the checked path gives."""
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("r", ROOT))
        checked = _counting_checked_appends(store, monkeypatch)
        head = "r"
        for n in range(20):
            fact = StateChangeEvent(id=f"s{n}", key="snapshot", value=n, parent_id=head)
            store.append("c", fact, move_head=False)
            store.append_batch("c", [msg(f"a{n}", head), msg(f"o{n}", f"a{n}")])
            head = f"o{n}"
        assert checked == []
        stored = [s.event for s in store.get_range("c", 0, 100)]
        tree = EventTree(stored)
        for event in stored:
            expected = [e.id for e in tree.path_to_root(event.id)]
            assert [e.id for e in store.path_to_root("c", event.id)] == expected
        # each step's call forks from the head (its fact took the head's segment)
        rows = {event_id: (seq, branch) for seq, event_id, _parent, branch in _rows(store, "c")}
        assert all(rows[f"a{n}"][1] == rows[f"a{n}"][0] for n in range(20))
        assert all(rows[f"o{n}"][1] == rows[f"a{n}"][0] for n in range(20))
        # a recent id again, or a parent nowhere: refused with its contract, nothing stored
        for event, contract in (
            (msg("a19", head), "APPEND-DUP-ID"),
            (msg("z", "nowhere"), "APPEND-NO-PARENT"),
        ):
            with pytest.raises(AppendError) as refused:
                store.append("c", event)
            assert refused.value.contract == contract
        assert store.event_count("c") == 61


def test_a_new_conversation_is_appended_to_without_a_read(postgres_url, monkeypatch):
    """The created row's key is the tail of an empty log: the first append (a run's system
    prompt) needs no read; made again by another writer meanwhile, it is checked."""
    with PostgresEventStore(postgres_url) as store, PostgresEventStore(postgres_url) as other:
        checked = _counting_checked_appends(store, monkeypatch)
        store.create_conversation("n")
        assert store.append_batch("n", [msg("prompt", ROOT), msg("hello")]) == [0, 1]
        assert checked == []
        assert [e.id for e in other.path_to_root("n")] == ["prompt", "hello"]
        store.create_conversation("m")
        other.delete_conversation("m")
        other.create_conversation("m")
        other.append("m", msg("theirs", ROOT))
        assert store.append("m", msg("mine")) == 1
        assert checked == ["m"]
        assert [e.id for e in other.path_to_root("m")] == ["theirs", "mine"]


def test_appends_planned_from_recent_events_store_what_the_checked_path_stores(
    postgres_url, monkeypatch
):
    """Random appends (legacy parents, parents a few events back, old parents, roots, side
    leaves, batches) through one store planning from its tail, and the same through a store
    made to check every append: the same seqs, parents and segments row for row; and the
    checked path taken exactly when a parent is not among the tail's recent events."""
    rng = random.Random(20261207)
    with PostgresEventStore(postgres_url) as planned, PostgresEventStore(postgres_url) as reference:
        planned.create_conversation("p")
        reference.create_conversation("k")
        checked = _counting_checked_appends(planned, monkeypatch)
        ids: list[str] = []
        recent: list[str] = []  # what the tail should hold: written since its last check
        for n in range(300):
            batch: list[MessageEvent] = []
            for k in range(rng.choice([1, 1, 1, 2, 3])):
                roll = rng.random()
                if not ids and not batch:
                    parent: str | None = ROOT
                elif roll < 0.3:
                    parent = None  # legacy: the event appended just before
                elif roll < 0.75:
                    parent = (ids + [e.id for e in batch])[-rng.randint(1, 6) :][0]
                elif roll < 0.97:
                    parent = rng.choice(ids or [ROOT])
                else:
                    parent = ROOT
                batch.append(msg(f"e{n}-{k}", parent))
            inside = {e.id for e in batch}
            named = {e.parent_id for e in batch} - inside - {None, ROOT}
            expect_checked = not named <= set(recent[-32:])
            move = rng.random() < 0.7
            before = len(checked)
            planned.append_batch("p", batch, move_head=move)
            assert (len(checked) > before) == expect_checked, (n, named, recent[-32:])
            reference._tails.clear()
            reference.append_batch("k", batch, move_head=move)
            recent = (recent[-1:] if expect_checked else recent) + [e.id for e in batch]
            ids += [e.id for e in batch]
        assert _rows(planned, "p") == _rows(reference, "k")
        assert planned.head("p") == reference.head("k")
        assert 0 < len(checked) < 200  # both paths were taken
        assert planned.integrity_check() == []


# -- LISTEN/NOTIFY across processes ----------------------------------------------------------

_LATE_APPENDER = """
    import sys, time
    from treadle.events.model import MessageEvent
    from treadle.store.postgres import PostgresEventStore
    url, count = sys.argv[1], int(sys.argv[2])
    store = PostgresEventStore(url)
    for n in range(count):
        time.sleep(0.02)
        store.append_batch("c", [MessageEvent(id=f"n{n}-{k}", source="agent") for k in range(2)])
    store.close()
"""


def test_subscriber_sees_another_process_appends_woken_by_notify(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.create_conversation("other")
        store.append_batch("c", [msg("a", ROOT), msg("b")])
        # A poll of 60 s: events arriving within the deadline prove NOTIFY woke the reader.
        stream = store.subscribe("c", after_seq=0, poll_interval=60)
        first = next(stream)
        assert (first.seq, first.event.id) == (1, "b")
        [child] = _run_children(_LATE_APPENDER, postgres_url, "15", count=1)
        store.append("other", msg("elsewhere", ROOT))  # another conversation's traffic
        started = time.monotonic()
        received = [next(stream) for _ in range(30)]
        waited = time.monotonic() - started
        child.communicate(timeout=60)
        stream.close()
    assert child.returncode == 0
    assert [s.seq for s in received] == list(range(2, 32))
    assert [s.event.id for s in received] == [f"n{n}-{k}" for n in range(15) for k in range(2)]
    assert waited < 30, "events arrived only by the safety-net poll: NOTIFY did not wake us"


def test_subscribe_to_a_missing_conversation_fails_at_once(postgres_url):
    from treadle.store.base import ConversationNotFound

    with PostgresEventStore(postgres_url) as store, pytest.raises(ConversationNotFound):
        store.subscribe("nope")


def test_closing_the_store_ends_a_waiting_subscriber(postgres_url):
    store = PostgresEventStore(postgres_url)
    store.create_conversation("c")
    seen: list[int] = []
    stream = store.subscribe("c", poll_interval=0.05)
    reader = threading.Thread(target=lambda: seen.extend(s.seq for s in stream))
    reader.start()
    store.append("c", msg("a", ROOT))
    wait_until(lambda: _subscriber_connections(postgres_url) == 1, 30, "the subscriber connected")
    # Waiting: it gave what was stored (under load it had connected but not yet read it, and
    # the close ended it before: seen was []).
    wait_until(lambda: seen == [0], 30, "the stored event delivered")
    store.close()
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert seen == [0]
    # The server ends a closed connection's backend on its own schedule.
    wait_until(lambda: _subscriber_connections(postgres_url) == 0, 30, "subscriber gone")


def _subscriber_connections(url: str) -> int:
    return backends(url, "subscribe")


def test_deleting_the_conversation_ends_its_subscribers(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        stream = store.subscribe("c", poll_interval=60)  # woken by the delete's notification
        assert next(stream).seq == 0
        threading.Timer(0.2, lambda: store.delete_conversation("c")).start()
        started = time.monotonic()
        assert list(stream) == []
        assert time.monotonic() - started < 30


def test_values_postgresql_cannot_hold_are_refused_clearly(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        with pytest.raises(StoreError, match="NUL"):
            store.create_conversation("a\x00b")
        store.create_conversation("c")
        with pytest.raises(StoreError, match="NUL"):
            store.append("c", msg("id\x00", ROOT))
        store.append("c", msg("a", ROOT, text="text\x00 with NUL is JSON-escaped"))
        assert store.path_to_root("c")[0].text == "text\x00 with NUL is JSON-escaped"
        assert store.get_conversation("c").event_count == 1


def test_a_subscription_cut_by_the_server_listens_again(postgres_url):
    """A terminated backend is replaced and the stream goes on after the last seq it gave
    (out of reach for longer, it says where to resume: test_faults_postgres)."""
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        stream = store.subscribe("c", poll_interval=0.05)
        assert next(stream).seq == 0
        with _admin(postgres_url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (f"treadle-subscribe:{_schema(postgres_url)}",),
            )
        store.append("c", msg("b"))
        assert next(stream).event.id == "b"
        stream.close()


def test_a_closed_stream_releases_its_connection(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        stream = store.subscribe("c")
        next(stream)
        assert _subscriber_connections(postgres_url) == 1
        stream.close()
        wait_until(lambda: _subscriber_connections(postgres_url) == 0, 30, "subscriber gone")
