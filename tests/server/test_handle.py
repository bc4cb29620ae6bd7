"""One handle, two places: the same tests run against the local ``Conversation`` (on SQLite)
and ``RemoteConversation`` (a real server on 127.0.0.1), both a ``ConversationHandle``; and the
client's ``wait`` ends on the stream's ``run_finished`` (falling back to polling without one)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.scripts import write_script
from treadle import (
    Conversation,
    ConversationHandle,
    ConversationSettings,
    RemoteConversation,
    TranscriptPage,
    TreadleClient,
)
from treadle.client import stream as client_stream
from treadle.data.transcript import MessageItem, ResponseItem, SystemPromptItem
from treadle.events.model import MessageEvent
from treadle.store.urls import open_store

TWO_CALLS = [
    {
        "tool_calls": [
            {"name": "terminal", "arguments": {"command": "echo one"}},
            {"name": "terminal", "arguments": {"command": "echo two"}},
        ]
    },
    {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
]


@pytest.fixture(params=["local", "remote"])
def handle_for(request, tmp_path: Path) -> Iterator:
    """Makes a conversation of the given scripted responses, local or remote."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    opened: list = []

    def local(responses: list[dict]) -> ConversationHandle:
        store = open_store(f"sqlite:///{tmp_path / 'local.db'}")
        settings = ConversationSettings.scripted(write_script(tmp_path, responses), workspace)
        conversation = Conversation.create(store, settings)
        opened.append(conversation)
        opened.append(store)
        return conversation

    def remote(responses: list[dict]) -> ConversationHandle:
        server = request.getfixturevalue("server")
        client = TreadleClient(server.base_url)
        opened.append(client)
        settings = ConversationSettings.scripted_inline(responses, workspace)
        return client.create_conversation(settings)

    yield local if request.param == "local" else remote
    for thing in reversed(opened):
        thing.close()


def test_both_are_conversation_handles(handle_for):
    handle = handle_for(TWO_CALLS)
    assert isinstance(handle, ConversationHandle)


def test_a_run_reads_the_same_through_either_handle(handle_for):
    handle = handle_for(TWO_CALLS)
    message = handle.send_message("go")
    assert isinstance(message, MessageEvent)
    assert message.text == "go"
    assert handle.run().value == "finished"
    assert handle.status.value == "finished"
    path = handle.active_path()
    assert path[-1].id == handle.head
    assert handle.pending_actions() == []
    assert handle.messages()[-1]["role"] in ("assistant", "tool")
    page = handle.transcript()
    assert isinstance(page, TranscriptPage)
    assert page.head == handle.head
    kinds = [type(item) for item in page.items]
    assert kinds[:3] == [SystemPromptItem, MessageItem, ResponseItem]
    first = page.items[2]
    assert isinstance(first, ResponseItem)
    assert [call.state for call in first.calls] == ["done", "done"]
    outputs = [call.result.event.content for call in first.calls if call.result]
    assert [output.splitlines()[0] for output in outputs] == ["one", "two"]
    # a page of one, then the older ones by the cursor
    newest = handle.transcript(limit=1)
    assert newest.items == page.items[-1:]
    assert newest.next_before_seq is not None
    older = handle.transcript(before_seq=newest.next_before_seq)
    assert older.items == page.items[:-1]


def test_a_fork_is_a_handle_of_the_same_kind(handle_for):
    handle = handle_for(TWO_CALLS)
    handle.send_message("go")
    handle.run()
    fork = handle.fork(handle.active_path()[1].id)
    try:
        assert isinstance(fork, ConversationHandle)
        assert type(fork) is type(handle)
        assert [item.type for item in fork.transcript().items] == ["system_prompt", "message"]
    finally:
        if isinstance(fork, Conversation):
            fork.close()


def test_the_signatures_differ_only_where_the_protocol_says():
    """Each method of the protocol takes, in both, what the protocol names (extra parameters
    have defaults): code written against the handle runs against either."""
    for name in ("send_message", "run", "pause", "interrupt", "confirm", "reject", "fork"):
        for kind in (Conversation, RemoteConversation):
            wanted = inspect.signature(getattr(ConversationHandle, name)).parameters
            given = inspect.signature(getattr(kind, name)).parameters
            assert list(wanted) == list(given)[: len(wanted)], (kind.__name__, name)
            extra = list(given.values())[len(wanted) :]
            assert all(p.default is not inspect.Parameter.empty for p in extra), (kind, name)


SLOW = [
    {"tool_calls": [{"name": "terminal", "arguments": {"command": "sleep 1.5; echo slept"}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
]


def _counting_views(conversation: RemoteConversation) -> list[str]:
    """Records each GET of the conversation's view (what polling would repeat)."""
    seen: list[str] = []
    original = conversation.client.api.request

    def request(method, path, **kwargs):
        if method == "GET" and path == f"/api/conversations/{conversation.id}":
            seen.append(path)
        return original(method, path, **kwargs)

    conversation.client.api.request = request  # type: ignore[method-assign]
    return seen


def test_wait_ends_on_the_streams_run_finished(server, client, settings_for):
    conversation = client.create_conversation(settings_for(SLOW))
    conversation.send_message("go")
    views = _counting_views(conversation)
    assert conversation.run(wait=False).value == "running"
    assert conversation.wait(timeout_s=120).value == "finished"
    # polling every 50 ms would read the view ~30 times over a 1.5 s command; the stream's
    # run_finished needs one read before and one after (its run letting go)
    assert len(views) <= 4, views


def test_wait_polls_when_the_stream_cannot_be_opened(server, client, settings_for, monkeypatch):
    def refused(self):
        raise OSError("no WebSockets here")

    monkeypatch.setattr(client_stream.EventSubscription, "_connect", refused)
    conversation = client.create_conversation(settings_for(SLOW))
    conversation.send_message("go")
    views = _counting_views(conversation)
    conversation.run(wait=False)
    assert conversation.wait(timeout_s=120, poll_s=0.05).value == "finished"
    assert len(views) > 4  # it polled
