"""One task attempt run in this process (as a worker runs it): setup with the network only
when allowed, the agent's time limit, the patch as the real diff (binary and removed files
too), the workspace gone afterwards, and the tool processes with it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.eval_tasks import FINISH, bash
from support.processes import host_pids_with
from treadle.data.settings import ModelChoice
from treadle.eval.runner import TaskJob, run_task_attempt
from treadle.eval.tasks import EvalTask
from treadle.eval.workspace import MAX_PATCH_BYTES, WorkspaceSetupError, patch_too_large
from treadle.store.urls import open_store


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A real TCP server on the host's 127.0.0.1 (reachable only with the network on)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def job(tmp_path: Path, task: EvalTask, **fields: object) -> TaskJob:
    assert task.model is not None
    options: dict = {"work_dir": str(tmp_path / "work"), **fields}
    return TaskJob(
        eval_id="e1",
        task=task,
        attempt=1,
        conversation_id=f"c-{task.id}",
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        model=task.model,
        **options,
    )


def task(tmp_path: Path, responses: list, **fields: str) -> EvalTask:
    start = tmp_path / "start"
    if not start.exists():
        start.mkdir()
        (start / "a.txt").write_text("one\n")
        (start / "logo.bin").write_bytes(bytes(range(256)))
        (start / ".gitignore").write_text("*.log\n")
    values = {"id": "t", "instruction": "go", "workspace": str(start), "verify": "true", **fields}
    return EvalTask(**values, model=ModelChoice(kind="scripted", responses=responses))


def test_setup_gets_the_network_only_when_allowed_and_verify_never(tmp_path, listening_port):
    reach = f"exec 3<>/dev/tcp/127.0.0.1/{listening_port}"
    one = task(tmp_path, [FINISH], setup=reach, verify=f"! ({reach})")
    refused = run_task_attempt(job(tmp_path, one))
    assert refused["status"] == "setup_failed"
    assert refused["passed"] is False
    assert refused["conversation_id"] is None
    assert refused["reason"].startswith("setup exited 1")
    allowed = run_task_attempt(job(tmp_path, one, setup_network=True))
    assert allowed["status"] == "finished"
    assert allowed["passed"] is True  # verify ran with the network off
    assert not list((tmp_path / "work").iterdir())  # every attempt folder is removed


def test_the_patch_is_the_real_diff_and_the_baseline_is_out_of_reach(tmp_path):
    script = [
        bash(
            "ls ../baseline.git; printf 'two\\n' >> a.txt && rm logo.bin && "
            "head -c 300 /dev/urandom > new.bin && mkdir -p sub/.git && echo x > sub/.git/f && "
            "echo ignored > run.log && printf 'caf\\351\\n' > 'odd *na\"me[1].txt'"
        ),
        FINISH,
    ]
    result = run_task_attempt(job(tmp_path, task(tmp_path, script)))
    assert result["status"] == "finished"
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        outputs = [
            stored.event.content
            for stored in store.get_range(result["conversation_id"], 0, 1000)
            if stored.event.kind == "observation"
        ]
    finally:
        store.close()
    assert "No such file or directory" in outputs[0]  # the agent cannot see the baseline
    check = tmp_path / "check"
    subprocess.run(["cp", "-r", str(tmp_path / "start"), str(check)], check=True)
    subprocess.run(["git", "apply", "-"], cwd=check, input=result["patch"].encode(), check=True)
    assert (check / "a.txt").read_text() == "one\ntwo\n"
    assert not (check / "logo.bin").exists()
    assert len((check / "new.bin").read_bytes()) == 300
    # Text git takes for text but that is not UTF-8 travels as a binary patch, exactly.
    assert (check / 'odd *na"me[1].txt').read_bytes() == b"caf\xe9\n"
    assert "sub/.git" not in result["patch"]
    assert "run.log" not in result["patch"]  # ignored by the workspace's .gitignore


def test_a_patch_over_the_bound_is_not_kept_and_never_read_whole(tmp_path):
    # The agent may write gigabytes (the sandbox's limit is per file, 4 GiB by default): the
    # patch was read into memory, sent back and stored whole (200 MiB: 270 MB of patch, 620 MB
    # of memory in the worker). 17 MiB of random bytes make a patch over MAX_PATCH_BYTES.
    over = MAX_PATCH_BYTES // (1024 * 1024) + 1
    script = [bash(f"head -c {over}M /dev/urandom > big.bin && printf 'two\\n' >> a.txt"), FINISH]
    result = run_task_attempt(job(tmp_path, task(tmp_path, script)))
    assert result["status"] == "finished"
    assert result["patch"] == patch_too_large()
    assert len(result["patch"]) < 200
    assert result["verify"] is None  # a patch not kept cannot be scored: a failure
    assert result["passed"] is False
    assert "(MAX_PATCH_BYTES): it was not kept" in result["reason"]
    assert not list((tmp_path / "work").iterdir())


def test_the_task_timeout_stops_the_agent_and_its_commands(tmp_path):
    marker = "sleep 37.25"
    slow = task(tmp_path, [bash(marker), FINISH])
    result = run_task_attempt(job(tmp_path, slow, task_timeout_s=1.0))
    assert result["status"] == "timeout"
    assert result["status_reason"] == "stopped after --task-timeout 1 s"
    assert result["verify"]["exit_code"] == 0  # verified all the same: the files are what they are
    assert result["passed"] is False  # but only a finished conversation passes
    assert result["seconds"] < 30
    assert host_pids_with(marker) == []


def test_starting_files_that_cannot_be_had_raise_and_leave_nothing(tmp_path):
    missing = EvalTask(
        id="m",
        instruction="go",
        repo=str(tmp_path / "no-repo"),
        commit="abc",
        verify="true",
        model=ModelChoice(kind="scripted", responses=[FINISH]),
    )
    with pytest.raises(WorkspaceSetupError, match="cannot clone"):
        run_task_attempt(job(tmp_path, missing))
    assert not list((tmp_path / "work").iterdir())


def test_a_killed_workers_attempt_folders_are_removed_by_the_next_attempt(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    ended = subprocess.Popen(["true"])
    ended.wait()
    orphan = work / f"treadle-eval-{ended.pid}-t-abc"
    (orphan / "workspace").mkdir(parents=True)
    mine = work / f"treadle-eval-{os.getpid()}-t-def"  # a live process's: kept
    mine.mkdir()
    result = run_task_attempt(job(tmp_path, task(tmp_path, [FINISH])))
    assert result["status"] == "finished"
    assert sorted(work.iterdir()) == [mine]


def test_an_attempt_folders_path_has_the_same_length_whatever_the_pid(tmp_path):
    """The path is in the model's requests (the terminal's cwd): its length, and so a task's
    token count, must not change with the number of digits of the worker's pid."""
    from treadle.eval.workspace import make_attempt_folder

    folder = make_attempt_folder(task(tmp_path, [FINISH]), tmp_path / "work")
    try:
        name = folder.root.name
        assert re.fullmatch(r"treadle-eval-\d{7}-t-[a-z0-9_]{8}", name), name
        assert int(name.split("-")[2]) == os.getpid()
    finally:
        folder.remove()
    # a killed worker's folder, named the same way, is still found and removed
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = tmp_path / "work" / f"treadle-eval-{ended.pid:07d}-t-def"
    dead.mkdir()
    assert run_task_attempt(job(tmp_path, task(tmp_path, [FINISH])))["status"] == "finished"
    assert not dead.exists()
