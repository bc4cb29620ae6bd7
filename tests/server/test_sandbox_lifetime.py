"""A sandboxed shell belongs to its conversation, not to the thread of the run that started it
(issue 22, item 4): on a real server the next run finds its cwd, exported variables and
background jobs; closing conversations frees every process, fd, cgroup and temp folder."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from support.waiting import wait_until
from treadle.client import TreadleClient
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.tools.terminal_folders import CGROUP_NAME, PREFIX
from treadle.runtime.workspace import check_bubblewrap

from .test_run_lifetimes import started_by_server

try:
    check_bubblewrap()
except Exception as problem:  # CI installs bubblewrap (make test)
    pytest.skip(f"bubblewrap cannot run here: {problem}", allow_module_level=True)

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def terminal(command: str) -> dict:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


def fd_targets(pid: int) -> list[str]:
    """What the server's fds are, less its store file's: those are its worker threads'
    connections (one per thread, as many as the thread pool holds, however many
    conversations there were), not anything a conversation owns."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if not os.path.basename(target).startswith("server.db"):
            targets.append(target)
    return sorted(targets)


@pytest.fixture
def temp(tmp_path: Path) -> Path:
    """The server's own TMPDIR: its terminal folders are counted there and nowhere else."""
    folder = tmp_path / "server-temp"
    folder.mkdir()
    return folder


@pytest.fixture
def sandboxed_server(store_url: str, tmp_path: Path, temp: Path):
    server = ServerProcess(store_url, log_dir=tmp_path, env={"TMPDIR": str(temp)}).start()
    yield server
    server.stop()
    assert_store_audits_clean(store_url)


def test_the_shell_keeps_cwd_variables_and_jobs_from_one_run_to_the_next(
    sandboxed_server: ServerProcess, settings_for, temp: Path
) -> None:
    first = terminal("mkdir -p sub; cd sub; export X=kept; sleep 1000 &")
    second = terminal('echo "cwd=${PWD##*/} x=$X jobs=$(jobs -r | wc -l)"')
    with TreadleClient(sandboxed_server.base_url) as client:
        conversation = client.create_conversation(settings_for([first, FINISH, second, FINISH]))
        assert conversation.info().isolation is None
        conversation.send_message("start something")
        assert conversation.run() is Status.FINISHED
        conversation.send_message("is it still there?")
        assert conversation.run() is Status.FINISHED
        isolation = conversation.info().isolation
        assert isolation is not None
        assert isolation.sandbox == "bubblewrap"
        observations = [e for e in conversation.active_path() if e.kind == "observation"]
        terminal_outputs = [e.content for e in observations if e.tool_name == "terminal"]
        assert terminal_outputs[1].splitlines()[0] == "cwd=sub x=kept jobs=1", terminal_outputs
        # One shell served both runs.
        assert len(list(temp.glob(PREFIX + "*"))) == 1
        conversation.delete()
    server_pid = sandboxed_server.process.pid
    wait_until(
        lambda: started_by_server(server_pid) == [], 30, "the shell to go with its conversation"
    )
    assert list(temp.glob(PREFIX + "*")) == []


def test_200_conversations_opened_and_closed_leave_nothing(
    sandboxed_server: ServerProcess, settings_for, temp: Path
) -> None:
    pid = sandboxed_server.process.pid
    settings = settings_for([terminal("echo hi; sleep 1000 &"), FINISH])
    cgroups: set[Path] = set()

    def open_run_close(client: TreadleClient, count: int) -> None:
        for _ in range(count):
            conversation = client.create_conversation(settings)
            conversation.send_message("go")
            assert conversation.run() is Status.FINISHED
            # The shell lives until its conversation closes: note its cgroup, then close.
            for folder in temp.glob(PREFIX + "*"):
                named = folder / CGROUP_NAME
                if named.exists():
                    cgroups.add(Path(named.read_text()))
            conversation.delete()

    def released() -> bool:
        return not started_by_server(pid) and not list(temp.glob(PREFIX + "*"))

    with TreadleClient(sandboxed_server.base_url) as client:
        open_run_close(client, 5)  # warm up: imports, pools, the spawner thread
        wait_until(released, 30, "the warm-up's shells to go")
        before = Counter(fd_targets(pid))
        open_run_close(client, 200)
        wait_until(released, 60, "every shell and temp folder to go")
        # A leaked shell keeps its pty, its wake pipe and its lock file: 600 fds for 200.
        grown = Counter(fd_targets(pid)) - before
        assert not grown, f"fds not given back: {dict(grown)}"
    assert [cgroup for cgroup in cgroups if cgroup.exists()] == []
