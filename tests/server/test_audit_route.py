"""GET /audit from the server's incremental audit: it follows appends made by another process
(a second server or a runtime sharing the store), forks, and a re-created conversation, always
equal to a full audit of the stored log."""

from __future__ import annotations

import httpx

from treadle.events.audit import audit_events
from treadle.events.model import ROOT, ActionEvent, MessageEvent, ObservationEvent
from treadle.store.urls import open_store


def _full(store, conversation_id: str, head: str | None = None) -> dict:
    events = [row.event for row in store.get_range(conversation_id, 0, 2**62)]
    report = audit_events(events, head=head or store.head(conversation_id))
    return report.to_summary_dict(1000)


def test_audit_follows_appends_forks_and_re_creation(server, store_url) -> None:
    store = open_store(store_url)
    url = f"{server.base_url}/api/conversations/c/audit"
    try:
        store.create_conversation("c")
        action = ActionEvent(
            id="a1",
            parent_id="m0",
            llm_response_id="r1",
            tool_call_id="call-1",
            tool_name="terminal",
            arguments={},
            raw_arguments="{}",
        )
        store.append_batch(
            "c", [MessageEvent(id="m0", source="user", text="go", parent_id=ROOT), action]
        )
        first = httpx.get(url).json()
        assert first == _full(store, "c")
        assert first["pending"] == ["a1"]

        answer = ObservationEvent(
            id="o1", parent_id="a1", action_id="a1", tool_call_id="call-1", tool_name="terminal"
        )
        store.append("c", answer)  # appended behind the server's back: it reads only this row
        after = httpx.get(url).json()
        assert after == _full(store, "c")
        assert after["pending"] == []
        assert after["counts"]["observation"] == 1

        store.append("c", MessageEvent(id="fork", source="user", text="again", parent_id="m0"))
        forked = httpx.get(url).json()
        assert forked == _full(store, "c")
        assert forked["heads"] == ["o1", "fork"]
        focused = httpx.get(url, params={"head": "a1"}).json()
        assert focused == _full(store, "c", "a1")
        assert focused["notices"]
        missing = httpx.get(url, params={"head": "nope"}).json()
        assert [v["contract"] for v in missing["violations"]] == ["TREE-HEAD"]

        store.delete_conversation("c")
        store.create_conversation("c")
        store.append("c", MessageEvent(id="new", source="user", text="hi", parent_id=ROOT))
        fresh = httpx.get(url).json()
        assert fresh == _full(store, "c")
        assert fresh["heads"] == ["new"]
        assert httpx.get(f"{server.base_url}/api/conversations/gone/audit").status_code == 404
    finally:
        store.close()
