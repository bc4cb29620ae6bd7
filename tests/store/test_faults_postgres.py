"""Real PostgreSQL faults under a store and its leases (issue 10, items 21, 22, 25): backends
terminated between and during operations, connections cut around a commit, a server out of
reach, a full disk. Nothing acknowledged is lost, nothing is stored twice, and what cannot be
done says StoreUnavailable."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest

from treadle.events.model import ROOT, MessageEvent
from treadle.store.base import StoreError, StoreUnavailable
from treadle.store.leases import PostgresRunLeases
from treadle.store.postgres import PostgresEventStore, parse_postgres_url

pytestmark = pytest.mark.postgres


def wait_until(condition, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds; fail the test if it never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition never held")
        time.sleep(0.02)


def msg(event_id: str, parent: str | None = None) -> MessageEvent:
    return MessageEvent(id=event_id, source="user", text=event_id, parent_id=parent)


def _schema(url: str) -> str:
    return dict(parse_qsl(urlsplit(url).query))["schema"]


def _admin(url: str) -> psycopg.Connection:
    conninfo, schema, _ = parse_postgres_url(url)
    return psycopg.connect(conninfo, autocommit=True, options=f'-c search_path="{schema}"')


def _backends(url: str, role: str) -> list[int]:
    """Backend pids of this test's connections of ``role`` (store, subscribe, leases)."""
    with _admin(url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (f"treadle-{role}:{_schema(url)}",),
        ).fetchall()
    return [pid for (pid,) in rows]


def _terminate(url: str, role: str) -> int:
    """pg_terminate_backend of every connection of ``role`` of this test's schema only (other
    tests share the server); how many there were."""
    pids = _backends(url, role)
    with _admin(url) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return len(pids)


# -- a TCP proxy to PostgreSQL that can be stopped, or cut a connection around a COMMIT ---------


class Proxy:
    """Forwards 127.0.0.1:<port> to the PostgreSQL server. ``stop`` makes the server
    unreachable (refused), ``start`` reachable again on the same port. ``arm`` cuts the next
    connection that sends a message holding ``trigger``: "before" drops that message unsent,
    "after" forwards it and drops the connection once the server has answered it (ready for
    the next query: committed), so the client never learns that its statement committed."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.cut: tuple[str, bytes] | None = None
        self.cuts = 0
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._spawn(self._accept, listener)

    def arm(self, mode: str, trigger: bytes = b"COMMIT") -> None:
        self.cut = (mode, trigger)

    def stop(self) -> None:
        """Close the listening socket and every forwarded connection."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
        for sock in sockets:
            # shutdown wakes its pump, which closes it (closing it here could leave the pump
            # waiting for an event that a closed socket never sends)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            server = socket.create_connection(self.target)
            with self._lock:
                self._sockets.update((client, server))
            self._spawn(self._pump, client, server)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        armed = False
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ)
            selector.register(server, selectors.EVENT_READ)
            try:
                while True:
                    for key, _ in selector.select():
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data:
                            return
                        if key.fileobj is client:
                            cut = self.cut
                            if cut is not None and cut[1] in data:
                                self.cut = None
                                self.cuts += 1
                                if cut[0] == "before":
                                    return
                                armed = True
                            server.sendall(data)
                        else:
                            if armed and _READY_FOR_QUERY in data:
                                return  # done and committed; the client never hears of it
                            client.sendall(data)
            except OSError:
                return
            finally:
                _close(client)
                _close(server)


_READY_FOR_QUERY = b"Z\x00\x00\x00\x05"
"""The message that ends the server's answer to a query (after its commit)."""


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@pytest.fixture
def proxy(postgres_url) -> Iterator[Proxy]:
    parts = urlsplit(postgres_url)
    found = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    found.start()
    yield found
    found.stop()


def _through(url: str, proxy: Proxy) -> str:
    """``url`` with the proxy as its server (no TLS: the proxy reads the statements)."""
    parts = urlsplit(url)
    netloc = (
        f"{parts.username}@127.0.0.1:{proxy.port}" if parts.username else f"127.0.0.1:{proxy.port}"
    )
    return parts._replace(netloc=netloc, query=parts.query + "&sslmode=disable").geturl()


# -- item 21: the store's pool reconnects ---------------------------------------------------


def test_an_idle_connection_killed_between_operations_is_replaced(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        assert _terminate(postgres_url, "store") >= 1
        # a read, an append and a repeatable write all go on, on a fresh connection
        assert store.get_conversation("c").event_count == 1
        assert _terminate(postgres_url, "store") >= 1
        assert store.append("c", msg("b")) == 1
        assert _terminate(postgres_url, "store") >= 1
        store.set_head("c", "a")
        assert _terminate(postgres_url, "store") >= 1
        store.delete_conversation("c")
        assert store.list_conversations() == []


def test_a_connection_killed_during_an_append_stores_it_once(postgres_url):
    with PostgresEventStore(postgres_url) as store, _admin(postgres_url) as locker:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        # hold the conversation's row lock so that the append waits inside its transaction
        locker.execute("BEGIN")
        locker.execute("SELECT 1 FROM conversations WHERE id = 'c' FOR UPDATE")
        result: list[object] = []
        appender = threading.Thread(target=lambda: result.append(store.append("c", msg("b"))))
        appender.start()
        with _admin(postgres_url) as watcher:
            wait_until(
                lambda: (
                    watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                        "AND wait_event_type = 'Lock'",
                        (f"treadle-store:{_schema(postgres_url)}",),
                    ).fetchone()[0]
                    == 1
                )
            )
        assert _terminate(postgres_url, "store") == 1
        locker.execute("ROLLBACK")
        appender.join(timeout=10)
        assert result == [1]
        assert [e.id for e in store.path_to_root("c")] == ["a", "b"]
        assert store.get_conversation("c").event_count == 2


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_append_cut_at_its_commit_is_stored_exactly_once(postgres_url, proxy, when):
    """The outcome is unknown to the client: the commit either never reached the server
    (before) or committed without an answer (after). The store looks the ids up first."""
    with PostgresEventStore(_through(postgres_url, proxy)) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        proxy.arm(when)
        assert store.append_batch("c", [msg("b"), msg("c")]) == [1, 2]
        assert proxy.cuts == 1
        assert store.append("c", msg("d")) == 3
    with PostgresEventStore(postgres_url) as direct:
        assert [e.id for e in direct.path_to_root("c")] == ["a", "b", "c", "d"]
        assert direct.integrity_check() == []


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_create_or_delete_cut_is_done_once_and_not_refused(postgres_url, proxy, when):
    with PostgresEventStore(_through(postgres_url, proxy)) as store:
        proxy.arm(when, b"INSERT INTO conversations")
        info = store.create_conversation("c", title="t", metadata={"k": 1})
        assert proxy.cuts == 1
        assert (info.id, info.title, info.metadata) == ("c", "t", {"k": 1})
        proxy.arm(when, b"DELETE FROM conversations")
        store.delete_conversation("c")
        assert proxy.cuts == 2
        assert store.list_conversations() == []


def test_an_unreachable_server_says_store_unavailable_and_is_used_again_once_back(
    postgres_url, proxy
):
    with PostgresEventStore(_through(postgres_url, proxy), reconnect_s=0.3) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        proxy.stop()
        with pytest.raises(StoreUnavailable, match=r"gave up after 0\.3 s"):
            store.get_conversation("c")
        with pytest.raises(StoreUnavailable, match="cannot connect to PostgreSQL"):
            store.append("c", msg("b"))
        proxy.start()
        assert store.append("c", msg("b")) == 1
        assert [e.id for e in store.path_to_root("c")] == ["a", "b"]


def test_a_full_disk_is_store_unavailable_and_stores_nothing(postgres_url):
    with PostgresEventStore(postgres_url) as store, _admin(postgres_url) as admin:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        # the error PostgreSQL raises when it cannot extend a file, from the real insert path
        admin.execute(
            "CREATE FUNCTION full_disk() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'could not extend file: No space left on device' "
            "USING ERRCODE = 'disk_full'; END $$"
        )
        admin.execute(
            "CREATE TRIGGER full_disk BEFORE INSERT ON events FOR EACH ROW "
            "EXECUTE FUNCTION full_disk()"
        )
        with pytest.raises(StoreUnavailable, match="out of resources"):
            store.append("c", msg("b"))
        admin.execute("DROP TRIGGER full_disk ON events")
        assert store.get_conversation("c").event_count == 1
        assert store.append("c", msg("b")) == 1


def test_a_bad_url_stays_a_store_error_not_an_outage(postgres_url):
    parts = urlsplit(postgres_url)
    wrong = parts._replace(path="/no_such_database_here").geturl()
    with pytest.raises(StoreError) as raised:
        PostgresEventStore(wrong)
    assert not isinstance(raised.value, StoreUnavailable)
    assert "does not exist" in str(raised.value)


def test_a_subscription_whose_connection_is_killed_listens_again(postgres_url):
    with PostgresEventStore(postgres_url) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        stream = store.subscribe("c", poll_interval=0.05)
        assert next(stream).seq == 0
        assert _terminate(postgres_url, "subscribe") == 1
        store.append("c", msg("b"))
        store.append("c", msg("c"))
        assert [next(stream).event.id for _ in range(2)] == ["b", "c"]
        assert len(_backends(postgres_url, "subscribe")) == 1
        stream.close()


def test_a_subscription_out_of_reach_says_where_to_resume(postgres_url, proxy):
    with PostgresEventStore(_through(postgres_url, proxy), reconnect_s=0.3) as store:
        store.create_conversation("c")
        store.append("c", msg("a", ROOT))
        stream = store.subscribe("c", poll_interval=0.05)
        assert next(stream).seq == 0
        proxy.stop()
        with pytest.raises(StoreUnavailable, match="after seq 0"):
            next(stream)


# -- item 22: the lease connection is reopened ------------------------------------------------


def _lease_rows(url: str) -> list[tuple[str, str]]:
    with _admin(url) as conn:
        return conn.execute("SELECT conversation_id, owner FROM run_leases").fetchall()


def test_leases_go_on_after_their_connection_is_killed(postgres_url):
    PostgresEventStore(postgres_url).close()  # the schema
    leases = PostgresRunLeases(postgres_url)
    try:
        assert leases.acquire("c", "me", 30)
        assert _terminate(postgres_url, "leases") == 1
        assert leases.renew("c", "me", 30)
        assert _terminate(postgres_url, "leases") == 1
        assert not leases.acquire("c", "other", 30)
        assert _terminate(postgres_url, "leases") == 1
        assert leases.expired() == []
        assert _terminate(postgres_url, "leases") == 1
        leases.release("c", "me")
        assert _lease_rows(postgres_url) == []
    finally:
        leases.close()


def test_a_release_out_of_reach_does_not_raise_and_the_lease_expires(postgres_url, proxy, caplog):
    PostgresEventStore(postgres_url).close()
    leases = PostgresRunLeases(_through(postgres_url, proxy), reconnect_s=0.3)
    try:
        assert leases.acquire("c", "me", 0.5)
        proxy.stop()
        with pytest.raises(StoreUnavailable):
            leases.renew("c", "me", 0.5)
        leases.release("c", "me")  # logged, not raised: the caller's thread goes on
        assert "could not release the run lease of c" in caplog.text
        proxy.start()
        wait_until(lambda: leases.expired() == ["c"])
        assert leases.acquire("c", "other", 30)
        leases.release("c", "other")
        assert _lease_rows(postgres_url) == []
    finally:
        leases.close()
