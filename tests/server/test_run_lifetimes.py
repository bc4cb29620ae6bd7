"""What a server keeps after a run: shells and conversation objects are released (idle
timeout), a failed background run is recorded as ERROR with its cause, and a stopping server
pauses only what runs."""

from __future__ import annotations

import os
from pathlib import Path

from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import TreadleClient
from treadle.events.model import PauseEvent
from treadle.runtime.conversation import Conversation
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.status import StreamState, read_status
from treadle.server.runs import RunManager
from treadle.store.base import EventQuery
from treadle.store.leases import open_leases
from treadle.store.urls import open_store

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def is_worker(pid: int) -> bool:
    """A worker process of ``treadle serve --workers N`` (part of the server, not a shell)."""
    try:
        return b"treadle.server.workers.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def started_by_server(pid: int) -> list[int]:
    """The live processes the server started besides its workers: its shells and tools."""
    return [child for child in descendants(pid) if not is_worker(child)]


def server_rss_mib(pid: int) -> float:
    """The RSS of the server: its front and its workers."""
    return sum(rss_mib(p) for p in [pid, *descendants(pid)] if p == pid or is_worker(p))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_shells_and_their_temp_folders_go_when_runs_end(store_url, tmp_path, settings_for):
    temp = tmp_path / "server-temp"
    temp.mkdir()
    server = ServerProcess(
        store_url,
        log_dir=tmp_path,
        extra_args=["--idle-timeout", "0.5"],
        env={"TMPDIR": str(temp)},  # the server's temp folder, to count leftovers
    ).start()
    pid = server.process.pid
    settings = settings_for(
        [{"tool_calls": [{"name": "terminal", "arguments": {"command": "echo hi"}}]}, FINISH]
    )

    def run_conversations(count: int) -> None:
        for _ in range(count):
            conversation = client.create_conversation(settings)
            conversation.send_message("say hi")
            assert conversation.run() is Status.FINISHED

    def released() -> bool:
        return not started_by_server(pid) and not list(temp.glob("treadle-terminal-*"))

    try:
        with TreadleClient(server.base_url) as client:
            assert started_by_server(pid) == []
            run_conversations(5)  # warm up: imports, caches, allocator arenas
            wait_until(released)
            baseline = server_rss_mib(pid)
            run_conversations(40)
            wait_until(released)  # every shell, and its temp folder, is gone
            grown = server_rss_mib(pid) - baseline
            # 40 kept conversations cost ~8 MiB (0.2 MiB each) plus 40 shells: far above this.
            assert grown < 6, f"server grew {grown:.1f} MiB over 40 finished conversations"
    finally:
        server.stop()
    assert not list(temp.glob("treadle-terminal-*"))
    assert_store_audits_clean(store_url)


def test_a_failed_background_run_records_error_with_its_cause(store_url, settings_for):
    store = open_store(store_url)
    runs = RunManager(store, open_leases(store_url), takeover=False)
    try:
        conversation = Conversation.create(store, settings_for([FINISH]))
        conversation.close()

        def fails(_conversation: Conversation) -> None:
            raise RuntimeError("the disk caught fire")

        runs.start(conversation.id, fails, "run")
        runs.wait(conversation.id, timeout=30)
        status, reason = read_status(store, conversation.id)
        assert status is Status.ERROR
        assert reason == "the run failed: RuntimeError: the disk caught fire"
        # What the API's view and the stream show is this recorded status.
        last = store.search(conversation.id, EventQuery(order="desc", limit=1)).items[0]
        facts = StreamState().advance(last.event)
        assert facts["status"] == {"status": "error", "reason": reason, "controls": ["run"]}
        assert facts["run_finished"]
        # The lease was released: the conversation can run again.
        runs.start(conversation.id, lambda c: c.send_message("again"), "run")
        runs.wait(conversation.id, timeout=30)
        assert read_status(store, conversation.id) == (Status.IDLE, "new user message")
    finally:
        runs.shutdown()
        store.close()


def test_a_clean_stop_pauses_only_what_runs(store_url, tmp_path, settings_for):
    server = ServerProcess(store_url, log_dir=tmp_path).start()
    slow = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": f"sleep 0.3; echo {i}"}}]}
        for i in range(30)
    ]
    try:
        with TreadleClient(server.base_url) as client:
            finished = client.create_conversation(settings_for([{"text": "hello"}]))
            finished.send_message("hi")
            assert finished.run() is Status.FINISHED
            running = client.create_conversation(settings_for([*slow, FINISH]))
            running.send_message("work slowly")
            running.run(wait=False)
            wait_until(lambda: bool(running.pending_actions()))
    finally:
        server.stop()
    store = open_store(store_url)
    try:
        assert read_status(store, finished.id)[0] is Status.FINISHED
        last = store.get_range(finished.id, 0, 10**9)[-1].event
        assert not isinstance(last, PauseEvent)
        assert not any(
            isinstance(s.event, PauseEvent) for s in store.get_range(finished.id, 0, 10**9)
        )
        assert read_status(store, running.id)[0] is Status.PAUSED
    finally:
        store.close()
    assert_store_audits_clean(store_url)
