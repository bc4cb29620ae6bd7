"""The typed client against a real server: every answer comes back as the model of
``treadle.api`` or ``treadle.events`` the endpoint promises (not a dict), and an answer of
another shape is a ``BadResponse`` naming the mismatch, not a KeyError later."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from treadle.api import (
    AuditView,
    ConversationList,
    ConversationStatus,
    ConversationView,
    EventItem,
    EventPage,
    TreeView,
)
from treadle.client import BadResponse, NotFound, TreadleClient
from treadle.errors import TreadleError
from treadle.events.model import ActionEvent, EventBase, MessageEvent, ObservationEvent

ECHO = {"tool_calls": [{"id": "c1", "name": "terminal", "arguments": {"command": "echo hi"}}]}


def test_answers_are_typed_models(client, settings_for) -> None:
    conversation = client.create_conversation(settings_for([ECHO, {"text": "done"}]), title="t")
    info = conversation.info()
    assert isinstance(info, ConversationView)
    assert (info.id, info.title, info.status) == (conversation.id, "t", ConversationStatus.IDLE)
    question = conversation.send_message("say hi")
    assert isinstance(question, MessageEvent)
    assert question.text == "say hi"
    assert conversation.run() is ConversationStatus.FINISHED

    listed = client.list_conversations()
    assert isinstance(listed, ConversationList)
    assert [(item.id, item.status) for item in listed.items] == [
        (conversation.id, ConversationStatus.FINISHED)
    ]
    page = conversation.search(kinds="action,observation")
    assert isinstance(page, EventPage)
    assert page.next_cursor is None
    assert [type(item.event) for item in page.items] == [ActionEvent, ObservationEvent]
    everything = list(conversation.iter_events(page_size=2))
    assert all(isinstance(item, EventItem) for item in everything)
    assert [item.seq for item in everything] == list(range(len(everything)))
    assert conversation.count() == len(everything)
    path = conversation.active_path()
    assert all(isinstance(event, EventBase) for event in path)
    assert path[-1].id == conversation.head == conversation.info().head_id
    audit = conversation.audit()
    assert isinstance(audit, AuditView)
    assert audit.clean
    assert audit.pending == []
    assert audit.counts["action"] == 1
    tree = conversation.tree()
    assert isinstance(tree, TreeView)
    assert tree.head == path[-1].id


def test_a_missing_conversation_is_a_typed_treadle_error(client) -> None:
    with pytest.raises(NotFound) as caught:
        client.conversation("missing")
    assert isinstance(caught.value, TreadleError)
    assert (caught.value.status, caught.value.code) == (404, "not_found")


class _OtherShape(BaseHTTPRequestHandler):
    """A server of another kind: every GET answers 200 with JSON that is not Treadle's."""

    def do_GET(self) -> None:
        body = json.dumps({"items": [{"id": 5}], "next_offset": "soon"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OtherShape)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_answer_of_another_shape_is_a_bad_response(other_server: str) -> None:
    with TreadleClient(other_server, max_retries=0) as client:
        with pytest.raises(BadResponse, match="not the expected shape") as caught:
            client.list_conversations()
        assert "next_offset" in str(caught.value)
        with pytest.raises(BadResponse, match="not the expected shape"):
            client.conversation("x").count()
