"""``treadle serve --workers 2``: 50 conversations through one front, spread over two worker
processes by their ids, run, confirmed, paused, interrupted, sent messages while they run,
forked, and followed on the stream; one worker is killed (SIGKILL) in the middle of its runs,
restarted by the front, and takes them over from the store. Every history ends as the script
says, audits clean (``GET …/audit``), and nothing is lost."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from support.postgres import fresh_schema_url
from support.scripts import assert_store_audits_clean, think_steps
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import RemoteError, TreadleClient
from treadle.client.conversation import RemoteConversation
from treadle.data.ids import slot_of
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status

CONVERSATIONS = 50
WORKERS = 2
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
KINDS = ("plain", "confirm", "pause", "interrupt", "crash")


def terminal(command: str) -> dict:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


def held(flag: str) -> dict:
    """A call that runs until the test creates ``flag`` in the workspace."""
    return terminal(f"until [ -e {flag} ]; do sleep 0.2; done; echo released")


def script(kind: str) -> tuple[list[dict], dict]:
    if kind == "plain":
        return think_steps(3), {}
    if kind == "confirm":
        return [terminal("echo confirmed"), FINISH], {"confirmation": ConfirmationPolicy.RISKY}
    if kind == "pause":
        return [held("go-pause"), terminal("echo after"), FINISH], {}
    if kind == "interrupt":
        return [terminal("sleep 600"), terminal("echo after"), FINISH], {}
    return [held("go-crash"), terminal("echo after"), FINISH], {}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def workers_store(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'workers.db'}"
        return
    with fresh_schema_url("treadle_workers") as url:
        yield url


def worker_pids(log: Path) -> dict[int, int]:
    """slot -> pid of its latest worker, from the front's log."""
    found: dict[int, int] = {}
    for slot, pid in re.findall(r"worker (\d+) \(pid (\d+)\) is up", log.read_text()):
        found[int(slot)] = int(pid)
    return found


def retrying(action: Callable[[], object]) -> object:
    """``action``, again while the front answers that a worker is restarting (502, 503)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return action()
        except RemoteError as error:
            if error.status not in (502, 503) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_fifty_conversations_over_two_workers_survive_a_killed_worker(
    workers_store: str, tmp_path: Path
) -> None:
    server = ServerProcess(workers_store, log_dir=tmp_path, lease_ttl=5.0, workers=WORKERS)
    server.start()
    log = tmp_path / f"server-{server.port}.log"
    try:
        with TreadleClient(server.base_url) as client:
            check_fifty(client, server, log, tmp_path)
    finally:
        server.stop()
    assert_store_audits_clean(workers_store)
    # Stopped: no worker left, and the private folder of their sockets is gone.
    folders = set(re.findall(r"unix socket (\S+)/worker-\d\.sock", log.read_text()))
    assert folders
    assert not any(Path(folder).exists() for folder in folders)
    for pid in worker_pids(log).values():
        assert not Path(f"/proc/{pid}").exists(), pid


def check_fifty(client: TreadleClient, server: ServerProcess, log: Path, tmp_path: Path) -> None:
    conversations: dict[str, tuple[str, Path, RemoteConversation]] = {}
    for index in range(CONVERSATIONS):
        kind = KINDS[index % len(KINDS)]
        workspace = tmp_path / f"w{index}"
        workspace.mkdir()
        responses, fields = script(kind)
        settings = ConversationSettings.scripted_inline(responses, workspace, **fields)
        conversation = client.create_conversation(settings, title=f"{kind} {index}")
        conversation.send_message(f"task {index}")
        conversations[conversation.id] = (kind, workspace, conversation)
    slots = {slot_of(key, WORKERS) for key in conversations}
    assert slots == {0, 1}  # server-made ids spread over both workers

    for _kind, _workspace, conversation in conversations.values():
        conversation.run(wait=False)

    def of(kind: str) -> list[tuple[Path, RemoteConversation]]:
        return [(w, c) for k, w, c in conversations.values() if k == kind]

    # Every held call in progress, on both workers: the listing (from either worker) says
    # they run in this server.
    for _workspace, conversation in of("pause") + of("crash") + of("interrupt"):
        wait_until(lambda c=conversation: bool(c.pending_actions()), 120, "a call in progress")
    listed = {item.id: item for item in client.list_conversations(limit=100).items}
    for _workspace, conversation in of("pause") + of("crash"):
        assert listed[conversation.id].running_here, conversation.id

    # Messages while they run (queued for the run's holder), pauses and interrupts.
    for _workspace, conversation in of("pause"):
        conversation.send_message("one more thing")
        conversation.pause()
    for _workspace, conversation in of("interrupt"):
        conversation.interrupt()
    for workspace, _conversation in of("pause"):
        (workspace / "go-pause").touch()

    for kind in ("pause", "interrupt"):
        for _workspace, conversation in of(kind):
            assert conversation.wait(timeout_s=120) is Status.PAUSED
    for _workspace, conversation in of("confirm"):
        assert conversation.wait(timeout_s=120) is Status.WAITING_FOR_CONFIRMATION
    for _workspace, conversation in of("crash"):
        conversation.send_message("while you work")  # queued in the log for the run's holder

    # A worker killed mid-run: its runs are taken over by its successor, from the store.
    pids = worker_pids(log)
    victim = 0
    assert any(slot_of(c.id, WORKERS) == victim for _w, c in of("crash"))
    os.kill(pids[victim], signal.SIGKILL)
    wait_until(lambda: worker_pids(log).get(victim) not in (None, pids[victim]), 120, "restart")
    wait_until(lambda: httpx.get(f"{server.base_url}/health").status_code == 200, 120, "workers up")
    for workspace, _conversation in of("crash"):
        (workspace / "go-crash").touch()
    for _workspace, conversation in of("confirm"):
        assert retrying(lambda c=conversation: c.confirm()) is Status.IDLE  # the calls ran
        retrying(lambda c=conversation: c.run(wait=False))
    for kind in ("pause", "interrupt"):
        for _workspace, conversation in of(kind):
            retrying(lambda c=conversation: c.run(wait=False))

    for key, (kind, _workspace, conversation) in conversations.items():
        status = retrying(lambda c=conversation: c.wait(timeout_s=180))
        assert status is Status.FINISHED, (key, kind, status, conversation.info().status_reason)
        check_history(kind, conversation)

    # A fork of each kind, from either worker's conversation, shows its parent's path.
    for kind in KINDS:
        parent = of(kind)[0][1]
        child = retrying(lambda p=parent, k=kind: p.fork(title=f"fork of {k}"))
        assert isinstance(child, RemoteConversation)
        assert [e.id for e in child.active_path()] == [e.id for e in parent.active_path()]
    health = httpx.get(f"{server.base_url}/health").json()
    assert health["workers"] == {"count": WORKERS, "ready": WORKERS}


def check_history(kind: str, conversation: RemoteConversation) -> None:
    audit = conversation.audit()
    assert audit.total == 0, (conversation.id, audit.violations)
    assert audit.pending == []
    path = conversation.active_path()
    messages = [e.text for e in path if e.kind == "message" and e.source == "user"]
    assert messages[0].startswith("task "), messages
    outputs = " ".join(getattr(e, "content", "") for e in path if e.kind == "observation")
    finished = [e for e in path if e.kind == "action" and e.tool_name == "finish"]
    assert len(finished) == 1, (conversation.id, kind)
    if kind == "plain":
        assert sum(e.kind == "action" and e.tool_name == "think" for e in path) == 3
    elif kind == "confirm":
        assert "confirmed" in outputs
    elif kind == "pause":
        assert "one more thing" in messages  # queued during the run, delivered, not lost
        assert "released" in outputs
        assert "after" in outputs
    elif kind == "interrupt":
        assert "after" in outputs
    else:  # crash: the victim's held call was closed by the take-over, or released
        assert "after" in outputs
        assert "while you work" in messages
