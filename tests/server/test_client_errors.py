"""The typed client against a real server: a stream closed with a final code (4404, 4400,
4401) ends with ``StreamRefused`` naming the code and the server's reason instead of
reconnecting forever; retries on outages (1013, a server that is gone) are bounded; HTTP errors
(404, 409, 413, 422, 429, 503) are typed and carry their code; answers are read up to a limit."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server_process import ServerProcess
from treadle.client import (
    AuthError,
    BadResponse,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    RemoteError,
    StreamRefused,
    StreamUnavailable,
    TooLarge,
    TooManyRequests,
    TreadleClient,
    Unavailable,
)
from treadle.client.http import HttpApi, retry_after_s
from treadle.client.stream import EventSubscription

SLOW = {"tool_calls": [{"name": "terminal", "arguments": {"command": "sleep 2"}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def consume(subscription: EventSubscription, within_s: float = 30.0) -> list[dict]:
    """Every message until the subscription ends; a watchdog closes one that would hang
    (the old client reconnected forever), so such a test fails instead of stalling CI."""
    watchdog = threading.Timer(within_s, subscription.close)
    watchdog.start()
    try:
        return list(subscription)
    finally:
        watchdog.cancel()
        subscription.close()


# -- the stream ---------------------------------------------------------------------------------


def test_a_stream_of_an_unknown_conversation_stops_with_4404(client: TreadleClient) -> None:
    subscription = EventSubscription(client.api, "no-such-conversation")
    with pytest.raises(StreamRefused) as caught:
        consume(subscription)
    assert caught.value.code == 4404
    assert caught.value.reason == "no such conversation"
    assert "4404" in str(caught.value)
    assert "no-such-conversation" in str(caught.value)
    assert subscription.reconnects == 0


def test_a_bad_after_seq_stops_with_4400_and_the_servers_reason(client, settings_for) -> None:
    conversation = client.create_conversation(settings_for([FINISH]))
    subscription = conversation.subscribe(after_seq=-5)
    with pytest.raises(StreamRefused) as caught:
        consume(subscription)
    assert caught.value.code == 4400
    assert "after_seq must be an integer from -1" in caught.value.reason
    assert subscription.reconnects == 0


@pytest.fixture
def keyed_server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(
        f"sqlite:///{tmp_path / 'keyed.db'}", api_keys=("right",), log_dir=tmp_path
    ).start()
    yield process
    process.stop()


def test_a_refused_key_stops_the_stream_with_4401(keyed_server, settings_for) -> None:
    with TreadleClient(keyed_server.base_url, api_key="right") as keyed:
        conversation = keyed.create_conversation(settings_for([FINISH]))
    with TreadleClient(keyed_server.base_url, api_key="wrong") as wrong:
        with pytest.raises(AuthError) as http:
            wrong.conversation(conversation.id)
        assert (http.value.status, http.value.code) == (401, "unauthorized")
        subscription = EventSubscription(wrong.api, conversation.id)
        with pytest.raises(StreamRefused) as caught:
            consume(subscription)
    assert caught.value.code == 4401
    assert "API key" in caught.value.reason


def test_a_server_that_is_gone_is_retried_a_bounded_number_of_times(nowhere_port: int) -> None:
    nowhere = HttpApi(f"http://127.0.0.1:{nowhere_port}")  # nothing listens there
    subscription = EventSubscription(nowhere, "c", max_retries=3, max_backoff_s=0.01)
    with pytest.raises(StreamUnavailable) as caught:
        consume(subscription)
    assert subscription.reconnects == 4  # the first attempt, then 3 retries, then it gave up
    assert "failed 4 times in a row" in str(caught.value)
    nowhere.close()


def test_an_unavailable_store_closes_1013_and_is_retried_then_given_up(
    client, server, store_url, settings_for
) -> None:
    # (Until the SQLite store notices its removed file itself, the driver's "no such table"
    # is the outage; the server maps both to 1013, as HTTP maps them to 503.)
    conversation = client.create_conversation(settings_for([FINISH]))
    database = Path(store_url.removeprefix("sqlite:///"))
    for path in database.parent.glob(database.name + "*"):
        os.remove(path)  # the store's files go: the server must say "unavailable", not lie
    subscription = conversation.subscribe(max_retries=2, max_backoff_s=0.01)
    with pytest.raises(StreamUnavailable) as caught:
        consume(subscription)
    assert caught.value.code == 1013  # "try again later": retried, not final
    assert "store unavailable" in caught.value.reason
    assert subscription.reconnects == 3
    server.stop()
    database.touch()  # an empty store file for the fixture's closing audit


# -- HTTP errors ----------------------------------------------------------------------------------


def test_http_errors_are_typed_and_carry_the_servers_code(client, settings_for) -> None:
    with pytest.raises(NotFound) as missing:
        client.conversation("nope")
    assert (missing.value.status, missing.value.code) == (404, "not_found")

    with pytest.raises(InvalidRequest) as bad:
        client.create_conversation(settings_for([FINISH]), id="a/b")
    assert (bad.value.status, bad.value.code) == (422, "invalid_request")
    assert "a/b" in bad.value.message

    conversation = client.create_conversation(settings_for([FINISH]))
    with pytest.raises(Conflict) as conflict:
        conversation.confirm()
    assert (conflict.value.status, conflict.value.code) == (409, "nothing_pending")
    assert isinstance(conflict.value, RemoteError)  # every typed error is still a RemoteError


def test_a_body_over_the_limit_is_a_typed_413(tmp_path, settings_for) -> None:
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'small.db'}",
        log_dir=tmp_path,
        extra_args=["--max-body-bytes", "4096"],
    ).start()
    try:
        with TreadleClient(server.base_url) as small:
            conversation = small.create_conversation(settings_for([FINISH]))
            with pytest.raises(TooLarge) as caught:
                conversation.send_message("x" * 10_000)
            assert (caught.value.status, caught.value.code) == (413, "body_too_large")
            assert "4096" in caught.value.message
    finally:
        server.stop()


def test_too_many_running_is_a_typed_429_and_not_retried(tmp_path, settings_for) -> None:
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'one.db'}", log_dir=tmp_path, extra_args=["--max-running", "1"]
    ).start()
    try:
        with TreadleClient(server.base_url) as one:
            first = one.create_conversation(settings_for([SLOW, FINISH]))
            second = one.create_conversation(settings_for([FINISH]))
            for conversation in (first, second):
                conversation.send_message("go")
            first.run(wait=False)
            with pytest.raises(TooManyRequests) as caught:
                second.run(wait=False)  # a POST: raised at once, never retried by the client
            assert (caught.value.status, caught.value.code) == (429, "too_many_running")
            assert "--max-running" in caught.value.message
            first.pause()
            first.wait(timeout_s=30)
    finally:
        server.stop()


def test_an_answer_over_the_size_limit_is_refused(client, settings_for) -> None:
    conversation = client.create_conversation(settings_for([FINISH]))
    conversation.send_message("m" * 5000)
    client.api.max_response_bytes = 4000
    with pytest.raises(BadResponse) as caught:
        conversation.active_path()
    assert "over 4000 bytes" in str(caught.value)
    client.api.max_response_bytes = 1_000_000
    assert len(conversation.active_path()) >= 1


def test_gets_are_retried_a_bounded_number_of_times_and_other_methods_never(
    nowhere_port: int,
) -> None:
    nowhere = HttpApi(f"http://127.0.0.1:{nowhere_port}", max_retries=2, max_retry_wait_s=0.01)
    sent: list[str] = []
    nowhere._client.event_hooks["request"] = [lambda request: sent.append(request.method)]
    with pytest.raises(ConnectionFailed) as caught:
        nowhere.request("GET", "/api/conversations")
    assert "no answer" in str(caught.value)
    with pytest.raises(ConnectionFailed):
        nowhere.request("POST", "/api/conversations/c/messages", json={"text": "once"})
    assert sent == ["GET", "GET", "GET", "POST"]
    nowhere.close()


def test_a_retry_honours_retry_after_up_to_a_bound() -> None:
    api = HttpApi("http://127.0.0.1:1", max_retry_wait_s=30)
    busy = Unavailable(503, "store_unavailable", "retry later", retry_after_s=2)
    assert api.retry_wait(busy, attempt=0) == 2
    too_long = TooManyRequests(429, "too_many_running", "full", retry_after_s=600)
    assert api.retry_wait(too_long, attempt=0) is None  # raised at once: not worth waiting
    assert api.retry_wait(TooManyRequests(429, "too_many_running", "full"), attempt=2) == 2.0
    assert api.retry_wait(NotFound(404, "not_found", "no"), attempt=0) is None
    api.close()


def test_retry_after_is_read_as_seconds_or_a_date() -> None:
    assert retry_after_s("5") == 5.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: now
    assert retry_after_s("soon") is None
    assert retry_after_s(None) is None
