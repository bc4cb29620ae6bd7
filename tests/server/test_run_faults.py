"""A run manager whose lease store fails under it (PostgreSQL, the lease table taken away: every
renew, release and expiry check fails) never leaves a run going on without its lease nor a
thread dead in silence: the run pauses with its reason, its clean-up still happens, and the
watcher says so once."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest

from support.postgres import POSTGRES_BASE_URL, fresh_schema_url
from support.waiting import wait_until
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.status import read_status
from treadle.server.runs import LEASE_UNRENEWED, RunManager
from treadle.store.leases import open_leases
from treadle.store.urls import open_store

pytestmark = pytest.mark.postgres

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


@pytest.fixture
def postgres_store_url() -> Iterator[str]:
    with fresh_schema_url("treadle_run_faults") as url:
        yield url


def _rename_leases(url: str, old: str, new: str) -> None:
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema}".{old} RENAME TO {new}')


def test_a_run_whose_lease_cannot_be_renewed_pauses_and_cleans_up(
    postgres_store_url, tmp_path, caplog
):
    store = open_store(postgres_store_url)
    runs = RunManager(store, open_leases(postgres_store_url), lease_ttl_s=0.6, idle_timeout_s=0)
    slow = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": f"sleep 0.2; echo {i}"}}]}
        for i in range(40)
    ]
    try:
        workspace = tmp_path / "workspace"
        settings = ConversationSettings.scripted_inline([*slow, FINISH], workspace)
        conversation = Conversation.create(store, settings)
        conversation.send_message("work")
        conversation.close()
        runs.start(conversation.id, lambda c: c.run(), "run")
        wait_until(lambda: bool(conversation.pending_actions()), what="a call in flight")
        with caplog.at_level(logging.WARNING, logger="treadle.server.runs"):
            _rename_leases(postgres_store_url, "run_leases", "run_leases_away")
            try:
                runs.wait(conversation.id, timeout=30)
            finally:
                _rename_leases(postgres_store_url, "run_leases_away", "run_leases")
        # Without its lease another server could take the run over: it stopped here instead.
        assert read_status(store, conversation.id) == (Status.PAUSED, LEASE_UNRENEWED)
        # The failing release did not skip the clean-up (idle timeout 0: object and shell go).
        assert runs.cached() == 0
        watcher_failures = [r for r in caplog.records if "lease watcher failed" in r.message]
        assert len(watcher_failures) == 1  # once, not every cycle
    finally:
        runs.shutdown()
        store.close()
