"""Runtime fixtures: a fresh SQLite store and workspace per test, and an audit of every stored
conversation after each test (issue 5: after every run, the log passes the core's audit)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from treadle.events.audit import audit_events
from treadle.store.base import EventStore
from treadle.store.urls import open_store


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    return tmp_path / "runtime.db"


@pytest.fixture
def store(store_file: Path) -> Iterator[EventStore]:
    opened = open_store(f"sqlite:///{store_file}")
    yield opened
    for info in opened.list_conversations(limit=1000):
        events = [item.event for item in opened.get_range(info.id, 0, 10**9)]
        report = audit_events(events)
        assert report.clean, (info.id, report.to_json_dict()["violations"])
    opened.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder
