"""A run always ends in a recorded state (issue 10, items 7, 18, 19, 21, 25): whatever fails,
the open calls are closed and the status says why; one bad response never bricks a conversation.
Real SQLite store, real tools, the real LiteLLM path against a local fake provider."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.fake_openai import FakeOpenAIServer
from treadle.events.audit import audit_events
from treadle.events.model import ROOT, ActionEvent, MessageEvent, SystemPromptEvent
from treadle.runtime import ending as ending_module
from treadle.runtime.conversation import CALL_IDS_KEY, MODEL_ERROR_KEY, Conversation
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.snapshots import snapshot_facts
from treadle.runtime.status import ConversationStatus as Status
from treadle.store.base import StoreUnavailable
from treadle.store.urls import open_store


def litellm_conversation(
    store, workspace: Path, server: FakeOpenAIServer, **fields
) -> Conversation:
    settings = ConversationSettings.litellm(
        "openai/test-model", workspace, server.base_url, **fields
    )
    return Conversation.create(store, settings)


def facts(store, conversation_id: str, key: str) -> list[dict]:
    return [
        item.event.value
        for item in store.get_range(conversation_id, 0, 10**6)
        if item.event.kind == "state_change" and item.event.key == key
    ]


def test_a_file_name_that_is_not_utf8_is_listed_and_stored(store, workspace):
    os.close(os.open(os.path.join(os.fsencode(workspace), b"bad-\xff-name.txt"), os.O_CREAT))
    replies = [
        {
            "tool_calls": [
                {"id": "v1", "name": "file_editor", "arguments": {"command": "view", "path": "."}}
            ]
        },
        {"text": "listed"},
    ]
    with (
        FakeOpenAIServer(replies) as server,
        litellm_conversation(store, workspace, server) as conv,
    ):
        conv.send_message("list the workspace")
        assert conv.run() is Status.FINISHED
        (observation,) = [e for e in conv.active_path() if e.kind == "observation"]
        # the workspace's snapshot is recorded too, the name made storable in its fact
        facts = snapshot_facts(store, conv.id)
    assert "bad-\ufffd-name.txt" in observation.content
    assert facts
    assert "bad-\ufffd-name.txt" in facts[0].value["changed"]


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (
            {"payload": {"id": "r1", "object": "chat.completion", "created": 1, "choices": []}},
            '"choices" is empty',
        ),
        (
            {"tool_calls": [{"id": "", "name": "terminal", "arguments": {"command": "ls"}}]},
            "empty id",
        ),
    ],
)
def test_an_unusable_response_is_a_recorded_model_error_and_the_conversation_goes_on(
    store, workspace, reply, problem
):
    with (
        FakeOpenAIServer([reply, {"text": "better now"}]) as server,
        litellm_conversation(store, workspace, server) as conv,
    ):
        conv.send_message("hello")
        assert conv.run() is Status.ERROR
        assert problem in (conv.status_reason or "")
        (fact,) = facts(store, conv.id, MODEL_ERROR_KEY)
        assert problem in fact["error"]
        assert json.loads(fact["raw_response"])["object"] == "chat.completion"
        assert conv.pending_actions() == []
        conv.send_message("try again")
        assert conv.run() is Status.FINISHED
        assert conv.active_path()[-1].text == "better now"


def test_repeated_call_ids_in_one_response_never_brick_the_conversation(store, workspace):
    twice = {"command": "echo once >> log.txt"}
    replies = [
        {"tool_calls": [{"id": "same", "name": "terminal", "arguments": twice}] * 2},
        {
            "tool_calls": [
                {"id": "same", "name": "terminal", "arguments": {"command": "cat log.txt"}}
            ]
        },
        {"text": "done"},
    ]
    with (
        FakeOpenAIServer(replies) as server,
        litellm_conversation(store, workspace, server) as conv,
    ):
        conv.send_message("log once")
        assert conv.run() is Status.FINISHED
        path = conv.active_path()
        renamed = facts(store, conv.id, CALL_IDS_KEY)
    # The repeat (PROJECT-DUP-CALL) was renamed and answered with an error, not run; the
    # next response's reuse of the id (LINK-UNIQUE) was renamed and run.
    assert (workspace / "log.txt").read_text() == "once\n"
    actions = [e for e in path if isinstance(e, ActionEvent)]
    assert [a.tool_call_id for a in actions] == ["same", "same~2", "same~3"]
    errors = [e for e in path if e.kind == "agent_error"]
    assert [e.tool_call_id for e in errors] == ["same~2"]
    assert "PROJECT-DUP-CALL" in errors[0].error
    assert "'same'" in errors[0].error
    assert [r["contract"] for fact in renamed for r in fact["renamed"]] == [
        "PROJECT-DUP-CALL",
        "LINK-UNIQUE",
    ]
    assert all(r["original"] == "same" for fact in renamed for r in fact["renamed"])
    sent = server.requests[2]["body"]["messages"]
    answered = sorted(m["tool_call_id"] for m in sent if m["role"] == "tool")
    assert answered == ["same", "same~2", "same~3"]


def test_any_exception_in_the_loop_records_error_with_its_cause(tmp_path, workspace):
    # A log an older runtime left unprojectable (two calls with one id in one response):
    # the run must end in ERROR naming the contract, not die and leave "running".
    store = open_store(f"sqlite:///{tmp_path / 'bricked.db'}")
    settings = ConversationSettings.litellm("openai/test-model", workspace, "http://127.0.0.1:9/v1")
    conv = Conversation.create(store, settings)
    prompt = SystemPromptEvent(text="s", parent_id=ROOT)
    user = MessageEvent(source="user", text="go", parent_id=prompt.id)
    first = ActionEvent(
        llm_response_id="r",
        tool_call_id="dup",
        tool_name="think",
        raw_arguments="{}",
        arguments={},
        parent_id=user.id,
    )
    second = first.model_copy(update={"id": "second", "parent_id": first.id})
    store.append_batch(conv.id, [prompt, user, first, second])
    with conv:
        # Calls without a result under no "running" status wait for an answer (the state
        # machine): nothing is asked until someone gives it.
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION
        conv.reject(reason="calls of an older runtime")
        assert conv.pending_actions() == []
        assert conv.run() is Status.ERROR
        assert "PROJECT-DUP-CALL" in (conv.status_reason or "")
        assert conv.stored_status() == (Status.ERROR, conv.status_reason)
    store.close()


class FlakyStore:
    """A real store whose appends fail as "unavailable" while ``down`` is set (an outage)."""

    def __init__(self, inner, *, fail_after: int, recover_after: int | None) -> None:
        self._inner = inner
        self._appends = 0
        self._fail_after = fail_after
        self._recover_after = recover_after

    def _check(self) -> None:
        self._appends += 1
        down = self._appends > self._fail_after and (
            self._recover_after is None or self._appends <= self._recover_after
        )
        if down:
            raise StoreUnavailable("the store cannot be reached: connection lost")

    def append(self, *args, **kwargs):
        self._check()
        return self._inner.append(*args, **kwargs)

    def append_batch(self, *args, **kwargs):
        self._check()
        return self._inner.append_batch(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_a_store_outage_mid_run_ends_in_error_once_the_store_is_back(store, workspace, monkeypatch):
    monkeypatch.setattr(ending_module, "STORE_RETRY_DELAYS_S", (0.01,) * 3)
    replies = [
        {"tool_calls": [{"id": "t1", "name": "terminal", "arguments": {"command": "echo hi"}}]}
    ]
    # appends: prompt, message, RUNNING (the isolation fact with it), call, then its result
    flaky = FlakyStore(store, fail_after=4, recover_after=6)  # the result's append fails
    with (
        FakeOpenAIServer(replies) as server,
        # Appends counted: no snapshot facts between them.
        litellm_conversation(flaky, workspace, server, snapshots=False) as conv,
    ):
        conv.send_message("say hi")
        assert conv.run() is Status.ERROR
        assert "the store failed" in (conv.status_reason or "")
    events = [item.event for item in store.get_range(conv.id, 0, 10**6)]
    assert audit_events(events).clean
    (closed,) = [e for e in events if e.kind == "agent_error"]
    assert closed.tool_call_id == "t1"
    assert "the store failed" in closed.error


def test_a_store_that_stays_down_raises_the_cause_to_the_caller(store, workspace, monkeypatch):
    monkeypatch.setattr(ending_module, "STORE_RETRY_DELAYS_S", (0.01,))
    flaky = FlakyStore(store, fail_after=4, recover_after=None)
    with (
        FakeOpenAIServer([{"text": "hi"}]) as server,
        litellm_conversation(flaky, workspace, server) as conv,
    ):
        conv.send_message("hello")
        with pytest.raises(StoreUnavailable, match="connection lost"):
            conv.run()
