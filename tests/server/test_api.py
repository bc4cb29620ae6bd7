"""The agent server through the typed client, against a real uvicorn on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest

from support.scripts import think_steps
from treadle.client import RemoteError
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.status import ConversationStatus as Status


def test_scripted_conversation_end_to_end(client, settings_for):
    calls = [
        {"id": "c1", "name": "terminal", "arguments": {"command": "echo hi > hi.txt"}},
        {"id": "c2", "name": "nope", "arguments": {}},
    ]
    settings = settings_for([{"text": "both", "tool_calls": calls}, *think_steps(2)])
    conversation = client.create_conversation(settings, id="conv-1", title="end to end")
    again = client.create_conversation(settings, id="conv-1")  # idempotent on a client id
    assert again.id == conversation.id == "conv-1"
    conversation.send_message("write hi.txt")
    assert conversation.run() is Status.FINISHED
    audit = conversation.audit()
    assert audit.violations == []
    assert audit.pending == []
    path = conversation.active_path()
    assert [e.kind for e in path][:5] == [
        "system_prompt",
        "message",
        "action",
        "action",
        "observation",
    ]
    assert conversation.count() == len(list(conversation.iter_events(page_size=3)))
    assert conversation.count(kinds="action") == 5
    messages = conversation.messages()
    assert sum(len(m.get("tool_calls") or []) for m in messages) == 5
    assert [e.id for e in conversation.active_path(limit=2)] == [e.id for e in path[-2:]]
    listed = client.list_conversations()
    assert [item.id for item in listed.items] == ["conv-1"]


def test_confirm_reject_fork_and_switch_branch(client, settings_for):
    calls = [
        {"id": "c1", "name": "terminal", "arguments": {"command": "echo one"}},
        {"id": "c2", "name": "terminal", "arguments": {"command": "echo two"}},
    ]
    settings = settings_for(
        [{"tool_calls": calls}, {"text": "ok"}], confirmation=ConfirmationPolicy.RISKY
    )
    conversation = client.create_conversation(settings)
    first = conversation.send_message("go")
    assert conversation.run() is Status.WAITING_FOR_CONFIRMATION
    pending = conversation.pending_actions()
    assert [a.tool_call_id for a in pending] == ["c1", "c2"]
    assert conversation.reject([pending[1].id], reason="no") is Status.WAITING_FOR_CONFIRMATION
    assert conversation.confirm([pending[0].id]) is Status.IDLE
    with pytest.raises(RemoteError) as caught:
        conversation.confirm()
    assert (caught.value.status, caught.value.code) == (409, "nothing_pending")
    assert conversation.run() is Status.FINISHED
    fork = conversation.fork(first.id, title="from the question")
    assert [e.id for e in fork.active_path()][-1] == first.id
    conversation.switch_branch(first.id)
    assert conversation.head == first.id
    assert conversation.info().status is Status.IDLE
    tree = conversation.tree()
    assert tree.head == first.id
    assert first.id in tree.branch_points or len(tree.heads) >= 1


def test_errors_are_json_with_the_right_status(client, server, settings_for):
    with pytest.raises(RemoteError) as caught:
        client.conversation("missing")
    assert (caught.value.status, caught.value.code) == (404, "not_found")
    response = httpx.post(f"{server.base_url}/api/conversations", json={"settings": 5})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"
    huge = httpx.post(
        f"{server.base_url}/api/conversations",
        content=b"x" * (17 * 1024 * 1024),
        headers={"content-type": "application/json"},
    )
    assert huge.status_code == 413
    conversation = client.create_conversation(settings_for(think_steps(30)))
    conversation.send_message("go")
    conversation.run(wait=False)
    with pytest.raises(RemoteError) as caught:
        conversation.run(wait=False)
    assert caught.value.status == 409
    conversation.wait()
    bad_head = httpx.put(
        f"{server.base_url}/api/conversations/{conversation.id}/head", json={"event_id": "nope"}
    )
    assert bad_head.status_code == 404


def test_openapi_docs_are_served(server):
    """/docs is the reference drawn by the server itself: every operation, no script, nothing
    loaded from elsewhere (FastAPI's Swagger UI came from a CDN: blank offline)."""
    schema = httpx.get(f"{server.base_url}/openapi.json").json()
    assert "/api/conversations/{conversation_id}/events" in schema["paths"]
    docs = httpx.get(f"{server.base_url}/docs")
    assert docs.status_code == 200
    assert docs.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in docs.headers["content-security-policy"]
    page = docs.text
    assert "<script" not in page
    assert "http://" not in page
    assert "https://" not in page
    assert "GET /api/conversations/{conversation_id}/events" in page
    operations = sum(
        method in item for item in schema["paths"].values() for method in ("get", "post",
        "put", "patch", "delete")
    )  # fmt: skip
    assert page.count("<article>") == operations
    assert httpx.get(f"{server.base_url}/redoc").status_code == 404
