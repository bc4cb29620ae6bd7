"""What a SIGKILLed sandboxed run leaves in TMPDIR (issue 28, defect 5): its terminal folder and
pids cgroup are removed by the next command that opens the store, a live terminal's never; and
no file of the folder ever holds a command's text."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from support.cli import run_treadle
from support.processes import alive, host_pids_with
from support.waiting import wait_until
from treadle.runtime.tools.terminal_folders import (
    CGROUP_NAME,
    PREFIX,
    UNLOCKED_GRACE_S,
    TerminalFolder,
    sweep,
)
from treadle.runtime.workspace import check_bubblewrap
from treadle.store.urls import open_store

MARKER = f"sleep 98765.{os.getpid()}{uuid.uuid4().int % 10**6:06d}"
"""In the command's text, and in the command line of the process it starts (found on the host):
this run's own, so that another suite's run of this test on the machine is never taken for it."""
COMMAND = f"echo probe-$((6*7)); {MARKER}"


def bubblewrap_or_skip() -> None:
    try:
        check_bubblewrap()
    except Exception as problem:  # CI installs bubblewrap (make test)
        pytest.skip(f"bubblewrap cannot run here: {problem}")


def regular_files_holding(folder: Path, text: str) -> list[Path]:
    """Files (regular only: never open a FIFO) under ``folder`` whose bytes contain ``text``."""
    found = []
    for path in folder.rglob("*"):
        with_text = stat.S_ISREG(path.lstat().st_mode) and text.encode() in path.read_bytes()
        if with_text:
            found.append(path)
    return found


def test_a_killed_sandboxed_run_leaves_nothing_after_the_next_command(tmp_path: Path) -> None:
    bubblewrap_or_skip()
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    env.pop("TREADLE_STORE", None)
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    script = tmp_path / "script.json"
    terminal = {"tool_calls": [{"name": "terminal", "arguments": {"command": COMMAND}}]}
    script.write_text(json.dumps({"responses": [terminal]}))
    child = subprocess.Popen(
        [
            *(sys.executable, "-m", "treadle", "run", "go"),
            *("--create-workspace", "--workspace", str(tmp_path / "ws")),
            *("--script", str(script), "--store", url),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        wait_until(lambda: host_pids_with(MARKER) or child.poll() is not None, 60, "the command")
        assert child.poll() is None, "the run ended before its command ran"
        sandbox_pids = host_pids_with(MARKER)
        (folder,) = temp.glob(PREFIX + "*")
        # The command runs: its text is in no file of the folder (a FIFO carried it).
        assert regular_files_holding(folder, MARKER) == []
        cgroup_file = folder / CGROUP_NAME
        cgroups = (
            [Path(line) for line in cgroup_file.read_text().split()] if cgroup_file.exists() else []
        )
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # The sandbox dies with the killed process; what it leaves is the folder (and cgroup).
    wait_until(lambda: not any(alive(pid) for pid in sandbox_pids), 30, "the sandbox to end")
    assert folder.exists()
    assert all(cgroup.exists() for cgroup in cgroups)

    listed = run_treadle("conversations", "--json", "--store", url, env={"TMPDIR": str(temp)})
    assert listed.returncode == 0, listed.stderr
    assert list(temp.glob(PREFIX + "*")) == []
    assert [cgroup for cgroup in cgroups if cgroup.exists()] == []


def test_a_sweep_never_removes_a_live_terminals_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    open_store(url).close()
    live = TerminalFolder.create(tmp_path)
    dead = tmp_path / f"{PREFIX}dead"
    dead.mkdir()
    (dead / "owner.lock").touch()  # nobody holds its lock: its owner died
    try:
        listed = run_treadle("conversations", "--store", url, env={"TMPDIR": str(tmp_path)})
        assert listed.returncode == 0, listed.stderr
        assert not dead.exists()  # the sweep ran
        assert live.path.exists()
        assert (live.path / "owner.lock").exists()
    finally:
        live.remove()
    assert not live.path.exists()


def test_a_folder_not_yet_locked_is_kept_until_it_is_old(tmp_path: Path) -> None:
    young = tmp_path / f"{PREFIX}young"
    young.mkdir()
    old = tmp_path / f"{PREFIX}old"
    old.mkdir()
    long_ago = time.time() - UNLOCKED_GRACE_S - 60
    os.utime(old, (long_ago, long_ago))
    swept = sweep(tmp_path)
    assert young.exists()
    assert not old.exists()
    assert swept.folders == 1


def test_a_sweep_removes_only_treadles_cgroups(tmp_path: Path) -> None:
    cgroups = tmp_path / "cgroups"
    foreign = cgroups / "someone-else"
    foreign.mkdir(parents=True)
    dead = tmp_path / f"{PREFIX}dead"
    dead.mkdir()
    (dead / "owner.lock").touch()  # nobody holds it: its owner died
    (dead / CGROUP_NAME).write_text(str(foreign))
    assert sweep(tmp_path, cgroup_roots=[cgroups]).folders == 1
    assert foreign.exists()  # named, but not one of Treadle's: never touched
    assert not dead.exists()


def test_store_check_repair_says_what_it_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    open_store(url).close()
    dead = tmp_path / f"{PREFIX}dead"
    dead.mkdir()
    (dead / "owner.lock").touch()
    checked = run_treadle(
        "store", "check", "--repair", "--json", "--store", url, env={"TMPDIR": str(tmp_path)}
    )
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["repaired"] == {"terminal_folders": 1, "cgroups": 0}
    assert not dead.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_the_fifo_follows_a_folder_given_to_the_sandbox_user(tmp_path: Path) -> None:
    folder = TerminalFolder.create(tmp_path)
    try:
        os.chown(folder.path, 4321, 4322)  # what a sandbox run as another user does
        folder.follow_owner()
        info = folder.fifo.lstat()
        assert stat.S_ISFIFO(info.st_mode)
        assert (info.st_uid, info.st_gid) == (4321, 4322)
        assert (folder.path / "owner.lock").stat().st_uid == 0  # the lock stays the maker's
    finally:
        folder.remove()
