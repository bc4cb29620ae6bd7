"""Interrupt through a real server and the typed client: a running command (a foreground sleep
and a background job it started) is killed now, its call is closed with an error marked
``interrupted: "user"``, the conversation is PAUSED; run again, the audit is clean and the model
was told. With two servers sharing a store (SQLite, PostgreSQL), the one that does not run the
conversation receives the interrupt and the one that does stops it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.postgres import fresh_schema_url
from support.processes import alive, host_pids_with
from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import RemoteConversation, TreadleClient
from treadle.data.status import ConversationStatus

INTERRUPT_WITHIN_S = 5.5
"""Under the foreground command's 6 s, so a call closed within it was interrupted, not
finished; the promise (about a second, 0.05-0.8 s measured on a quiet machine) is the
benchmark's to track, not a test's: on a loaded 2-core machine the cross-server path took
up to 4.7 s. (With a 30 s command, one CI run saw the run stay "running" over 60 s after its
interrupted call was closed and its processes were gone: under investigation, see the notes.)"""

# A background job that would outlive everything, then a foreground command of 6 s, then a
# line that must never run once the command is interrupted.
# Their sleep arguments find them on the host: the command runs sandboxed, where $$ and $!
# are pids of the sandbox's own namespace.
BACKGROUND, FOREGROUND = "sleep 300.25", "sleep 6.25"
COMMAND = (
    f"{BACKGROUND} & echo $! > bg.pid; "
    f"bash -c 'echo $$ > fg.pid; exec {FOREGROUND}'; "
    "echo ran-on > after.txt"
)


def _responses() -> list[dict]:
    return [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": COMMAND}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
    ]


def _interrupted_errors(conversation: RemoteConversation) -> list:
    return [
        e
        for e in conversation.active_path()
        if e.kind == "agent_error" and getattr(e, "interrupted", None) == "user"
    ]


def _interrupt_mid_command(
    running: RemoteConversation, receiver: RemoteConversation, workspace: Path, send
) -> None:
    """Start the run through ``running``, interrupt through ``send`` (called with
    ``receiver``) once the command runs, and check everything the interrupt promises."""
    running.send_message("sleep a while")
    running.run(wait=False)
    wait_until(lambda: (workspace / "fg.pid").exists() and (workspace / "bg.pid").exists())
    wait_until(lambda: bool((workspace / "fg.pid").read_text().strip()))
    wait_until(lambda: all(host_pids_with(marker) for marker in (FOREGROUND, BACKGROUND)))
    pids = [pid for marker in (FOREGROUND, BACKGROUND) for pid in host_pids_with(marker)]
    assert all(alive(pid) for pid in pids)

    sent = time.monotonic()
    send(receiver)
    wait_until(lambda: bool(_interrupted_errors(running)), timeout_s=30, what="interrupted call")
    closed_after = time.monotonic() - sent
    assert closed_after < INTERRUPT_WITHIN_S, f"call closed {closed_after:.2f} s after interrupt"
    wait_until(lambda: not any(alive(pid) for pid in pids), timeout_s=30, what="pids gone")
    assert running.wait(timeout_s=60) is ConversationStatus.PAUSED  # generous: a loaded CI
    assert receiver.info().status is ConversationStatus.PAUSED
    time.sleep(0.2)  # the line after the command would have run by now, had bash gone on
    assert not (workspace / "after.txt").exists()

    (error,) = _interrupted_errors(running)
    assert "interrupted by the user" in error.error
    assert receiver.info().status_reason.startswith("interrupted by the user")

    assert running.run() is ConversationStatus.FINISHED
    assert running.audit().violations == []
    tool_messages = [m for m in running.messages() if m["role"] == "tool"]
    assert len(tool_messages) == 2  # the interrupted call, then finish
    assert tool_messages[0]["content"] == error.error
    assert "interrupted by the user" in tool_messages[0]["content"]


def test_interrupt_through_the_client_stops_the_command_now(server, client, settings_for):
    settings = settings_for(_responses())
    conversation = client.create_conversation(settings)
    workspace = Path(settings.workspace)
    _interrupt_mid_command(conversation, conversation, workspace, lambda c: c.interrupt())


def test_interrupt_through_the_http_route(server, client, settings_for):
    settings = settings_for(_responses())
    conversation = client.create_conversation(settings)
    workspace = Path(settings.workspace)

    def post(receiver: RemoteConversation) -> None:
        response = httpx.post(f"{server.base_url}/api/conversations/{receiver.id}/interrupt")
        assert response.status_code == 202, response.text
        assert response.json()["operation"] == "interrupt"

    _interrupt_mid_command(conversation, conversation, workspace, post)


def test_pause_still_lets_the_running_command_end(server, client, settings_for, tmp_path):
    command = "touch started; sleep 1; echo finished > paused.txt"
    settings = settings_for(
        [{"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}]
    )
    conversation = client.create_conversation(settings)
    conversation.send_message("go")
    conversation.run(wait=False)
    # Paused once the command runs (its shell, and sandbox, take a moment to start).
    wait_until((Path(settings.workspace) / "started").exists)
    conversation.pause()
    assert conversation.wait(timeout_s=60) is ConversationStatus.PAUSED
    assert (Path(settings.workspace) / "paused.txt").read_text() == "finished\n"
    assert _interrupted_errors(conversation) == []


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store_url(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    request.applymarker(pytest.mark.postgres)
    with fresh_schema_url("treadle_interrupt") as url:
        yield url


def test_interrupt_sent_to_the_other_server_reaches_the_run(
    shared_store_url, settings_for, tmp_path
):
    settings = settings_for(_responses())
    runner = ServerProcess(shared_store_url, log_dir=tmp_path).start()
    other = ServerProcess(shared_store_url, log_dir=tmp_path).start()
    try:
        with (
            TreadleClient(runner.base_url) as via_runner,
            TreadleClient(other.base_url) as via_other,
        ):
            conversation = via_runner.create_conversation(settings)
            receiver = via_other.conversation(conversation.id)
            _interrupt_mid_command(
                conversation, receiver, Path(settings.workspace), lambda c: c.interrupt()
            )
            assert not receiver.info().running_here
    finally:
        runner.stop()
        other.stop()
    assert_store_audits_clean(shared_store_url)
