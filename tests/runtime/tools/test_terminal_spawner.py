"""A sandboxed shell outlives the thread that started it (issue 22, item 4): bubblewrap's
parent-death signal follows the forking thread, so shells are forked by the spawner thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from treadle.data.settings import SandboxSettings
from treadle.runtime.tools.bash_session import BashSession
from treadle.runtime.workspace import check_bubblewrap
from treadle.runtime.workspace.sandbox import SandboxedWorkspace
from treadle.runtime.workspace.spawner import THREAD_NAME, popen, spawner_thread

try:
    check_bubblewrap()
except Exception as problem:  # CI installs bubblewrap (make test)
    pytest.skip(f"bubblewrap cannot run here: {problem}", allow_module_level=True)


def test_a_sandboxed_shell_started_by_a_thread_that_ended_lives_on(tmp_path: Path) -> None:
    workspace = SandboxedWorkspace(tmp_path / "ws", SandboxSettings(), create=True)
    made: list[BashSession] = []

    def first_run() -> None:  # a server's run thread: it starts the shell, then ends
        session = BashSession(workspace.root, start=workspace.shell_command)
        session.run("mkdir -p sub; cd sub; export X=kept; sleep 1000 &", 30)
        made.append(session)

    thread = threading.Thread(target=first_run)
    thread.start()
    thread.join(60)
    (session,) = made
    try:
        outcome = session.run('echo "${PWD##*/} $X $(jobs -r | wc -l)"', 30)
        assert outcome.shell_alive
        assert outcome.output.strip() == "sub kept 1"
    finally:
        session.close()
    assert not session.alive


def test_the_spawner_is_one_long_lived_thread(tmp_path: Path) -> None:
    forked_by: list[threading.Thread | None] = []

    def start() -> None:
        process = popen(["/bin/true"])
        process.wait()
        forked_by.append(spawner_thread())

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(forked_by) == 3
    assert len({id(thread) for thread in forked_by}) == 1
    spawner = forked_by[0]
    assert spawner is not None
    assert spawner.name == THREAD_NAME
    assert spawner.is_alive()
