"""Auth, Host and Origin checks on HTTP and WebSocket, with and without keys."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from treadle.client import AuthError, RemoteError, TreadleClient, Unauthorized
from treadle.errors import TreadleError

KEY = "k-0123456789"


@pytest.fixture
def keyed_server(store_url, tmp_path) -> Iterator[ServerProcess]:
    process = ServerProcess(store_url, api_keys=(KEY, "second-key"), log_dir=tmp_path).start()
    yield process
    process.stop()
    assert_store_audits_clean(store_url)


def test_every_route_needs_a_key(keyed_server):
    url = f"{keyed_server.base_url}/api/conversations"
    assert httpx.get(url).status_code == 401
    wrong = httpx.get(url, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "unauthorized"
    assert httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert httpx.get(url, headers={"Authorization": "Bearer second-key"}).status_code == 200
    with TreadleClient(keyed_server.base_url) as anonymous, pytest.raises(Unauthorized) as caught:
        anonymous.list_conversations()
    assert caught.value.status == 401
    assert isinstance(caught.value, RemoteError)
    assert isinstance(caught.value, TreadleError)
    assert AuthError is Unauthorized  # the name before issue 11 still catches it


def _conversation(server: ServerProcess, settings_for) -> str:
    with TreadleClient(server.base_url, api_key=KEY) as client:
        conversation = client.create_conversation(settings_for([{"text": "hello"}]))
        conversation.send_message("hi")
        conversation.run()
        return conversation.id


def test_websocket_key_in_header_or_first_message(keyed_server, settings_for):
    conversation_id = _conversation(keyed_server, settings_for)
    url = f"ws://127.0.0.1:{keyed_server.port}/api/conversations/{conversation_id}/events/stream"
    with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as socket:
        assert json.loads(socket.recv(timeout=5))["seq"] == 0
    with connect(url) as socket:
        socket.send(json.dumps({"api_key": KEY}))
        assert json.loads(socket.recv(timeout=5))["seq"] == 0
    with connect(url) as socket:
        socket.send(json.dumps({"api_key": "wrong"}))
        with pytest.raises(ConnectionClosed):
            socket.recv(timeout=5)
        assert socket.close_code == 4401


def test_host_and_origin_are_checked_without_a_key(server):
    url = f"{server.base_url}/api/conversations"
    assert httpx.get(url).status_code == 200  # no key configured: local use is open
    rebinding = httpx.get(url, headers={"Host": "attacker.example:8000"})
    assert rebinding.status_code == 403
    assert rebinding.json()["error"]["code"] == "host_not_allowed"
    cross_site = httpx.post(url, json={}, headers={"Origin": "https://evil.example"})
    assert cross_site.status_code == 403
    assert cross_site.json()["error"]["code"] == "origin_not_allowed"
    same_site = httpx.get(url, headers={"Origin": server.base_url})
    assert same_site.status_code == 200
    assert httpx.get(url, headers={"Origin": "null"}).status_code == 403


def test_websocket_from_another_origin_is_refused(server):
    url = f"ws://127.0.0.1:{server.port}/api/conversations/x/events/stream"
    with pytest.raises(InvalidStatus) as caught, connect(url, origin="https://evil.example"):
        pass
    assert caught.value.response.status_code == 403
