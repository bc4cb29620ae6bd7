"""Scripts for the scripted model and the audit check shared by the server tests."""

from __future__ import annotations

import json
from pathlib import Path

from treadle.events.audit import audit_events
from treadle.store.urls import open_store


def write_script(folder: Path, responses: list[dict]) -> Path:
    path = folder / f"script-{len(list(folder.glob('script-*.json')))}.json"
    path.write_text(json.dumps({"responses": responses}))
    return path


def think_steps(count: int) -> list[dict]:
    steps = [
        {"tool_calls": [{"name": "think", "arguments": {"thought": f"step {i}"}}]}
        for i in range(count)
    ]
    return [*steps, {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}]


def assert_store_audits_clean(store_url: str) -> None:
    store = open_store(store_url)
    try:
        for info in store.list_conversations(limit=1000):
            events = [item.event for item in store.get_range(info.id, 0, 10**9)]
            report = audit_events(events)
            assert report.clean, (info.id, report.to_json_dict()["violations"])
    finally:
        store.close()
