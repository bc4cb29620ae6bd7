"""The run manager says no with the runtime's domain errors, not HTTP ones, and
``status_of`` is the one place that turns them into the status codes and error codes on the
wire (which stay what clients know: 409 ``already_running``, 429 ``too_many_running``...)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from treadle.runtime.conversation import Conversation
from treadle.runtime.errors import (
    ConversationBusy,
    ConversationError,
    NothingPending,
    NotPending,
    NotRunnable,
    NotWaiting,
    TooManyRunning,
)
from treadle.server.errors import status_of
from treadle.server.runs import RunManager
from treadle.store.leases import open_leases
from treadle.store.urls import open_store

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def test_each_domain_error_has_its_wire_code() -> None:
    assert status_of(ConversationBusy("c")) == (409, "already_running")
    assert status_of(NothingPending()) == (409, "nothing_pending")
    assert status_of(NotWaiting("running")) == (409, "not_waiting")
    assert status_of(NotPending(["x"], ["y"])) == (409, "not_pending")
    assert status_of(NotRunnable("no settings")) == (409, "not_runnable")
    assert status_of(TooManyRunning("full")) == (429, "too_many_running")
    assert status_of(ConversationError("anything else")) == (409, "conflict")


def test_the_run_manager_raises_domain_errors(tmp_path: Path, settings_for) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = open_store(url)
    runs = RunManager(store, open_leases(url), takeover=False, max_running=1)
    release = threading.Event()
    try:
        ids = []
        for _ in range(2):
            with Conversation.create(store, settings_for([FINISH])) as conversation:
                ids.append(conversation.id)
        store.create_conversation("imported")  # no runtime settings
        runs.start(ids[0], lambda _c: release.wait(10), "hold")
        with pytest.raises(ConversationBusy, match="is running"):
            runs.start(ids[0], lambda _c: None, "again")
        with (
            pytest.raises(ConversationBusy, match="pause it first"),
            runs.exclusive(ids[0], "pause it first"),
        ):
            pass
        with pytest.raises(TooManyRunning, match="--max-running"):
            runs.start(ids[1], lambda _c: None, "second")
        with pytest.raises(NotRunnable, match="no runtime settings"):
            runs.conversation("imported")
    finally:
        release.set()
        runs.wait(ids[0], 10)
        runs.shutdown()
        store.close()
