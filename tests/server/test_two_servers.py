"""Two server processes on one PostgreSQL store: a run started through A is streamed through B;
A is killed mid-run, B takes the run lease over and the conversation ends audited clean."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from support.postgres import fresh_schema_url
from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.events.model import event_to_dict

pytestmark = pytest.mark.postgres


@pytest.fixture
def postgres_store_url() -> Iterator[str]:
    with fresh_schema_url("treadle_servers") as url:
        yield url


def test_run_through_a_streamed_through_b_survives_killing_a(
    postgres_store_url, settings_for, tmp_path
):
    slow_steps = [
        {
            "tool_calls": [
                {"name": "terminal", "arguments": {"command": f"sleep 0.3; echo step {i}"}}
            ]
        }
        for i in range(12)
    ]
    finish = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
    settings = settings_for([*slow_steps, finish])
    server_a = ServerProcess(postgres_store_url, lease_ttl=2, log_dir=tmp_path).start()
    server_b = ServerProcess(postgres_store_url, lease_ttl=2, log_dir=tmp_path).start()
    try:
        with TreadleClient(server_a.base_url) as via_a, TreadleClient(server_b.base_url) as via_b:
            conversation = via_a.create_conversation(settings, id="shared")
            conversation.send_message("work slowly")
            subscription = via_b.conversation("shared").subscribe()
            watchdog = threading.Timer(120, subscription.close)
            watchdog.start()
            conversation.run(wait=False)
            killed = False
            outcome = None
            for message in subscription:
                if (
                    not killed
                    and message["type"] == "event"
                    and message["event"]["kind"] == "action"
                ):
                    actions = sum(1 for e in subscription.events.values() if e.kind == "action")
                    if actions == 4:
                        server_a.kill()  # mid-run, probably mid-tool
                        killed = True
                if message["type"] == "run_finished" and killed:
                    outcome = message["status"]
                    if outcome == "finished":
                        break
            watchdog.cancel()
            subscription.close()
            assert killed
            assert outcome == "finished"
            on_b = via_b.conversation("shared")
            assert on_b.audit().violations == []
            stored = list(on_b.iter_events())
            assert [event_to_dict(subscription.events[s.seq]) for s in stored] == [
                event_to_dict(s.event) for s in stored
            ]
            outputs = [e.content for e in on_b.active_path() if e.kind == "observation"]
            assert outputs[-1] == "done"
    finally:
        server_a.kill()
        server_b.stop()
    assert_store_audits_clean(postgres_store_url)
