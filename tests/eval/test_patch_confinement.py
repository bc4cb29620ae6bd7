"""An attempt's patch is collected by git inside the attempt's sandbox (issue 22): every git
run on the agent's files goes through bubblewrap, with the network off, and the patch is the
same as one collected on the host."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from treadle.data.settings import SandboxSettings
from treadle.eval import workspace as eval_workspace
from treadle.eval.tasks import EvalTask
from treadle.eval.workspace import (
    AttemptFolder,
    collect_patch,
    make_attempt_folder,
    record_baseline,
)
from treadle.runtime.workspace.sandbox import BWRAP

pytestmark = pytest.mark.skipif(shutil.which(BWRAP) is None, reason="needs bubblewrap")


def _attempt(tmp_path: Path, sandbox: SandboxSettings | None) -> AttemptFolder:
    start = tmp_path / "start"
    if not start.exists():
        (start / "d").mkdir(parents=True)
        (start / "a.txt").write_text("one\n")
        (start / "d" / "b.txt").write_text("kept\n")
    task = EvalTask(id="t", instruction="go", workspace=str(start), verify="true")
    folder = make_attempt_folder(task, tmp_path / "work", sandbox=sandbox)
    record_baseline(folder)
    # What an agent leaves: a change, a file that is not UTF-8, a new file, a removed one,
    # a link to a host file, a FIFO and an ignore file of its own.
    (folder.workspace / "a.txt").write_text("two\n")
    (folder.workspace / "latin.txt").write_bytes(b"caf\xe9\n")
    (folder.workspace / "d" / "b.txt").unlink()
    (folder.workspace / "host").symlink_to("/etc/passwd")
    (folder.workspace / ".gitignore").write_text("*\n")
    subprocess.run(["mkfifo", str(folder.workspace / "pipe")], check=True)
    return folder


def _record_runs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command lines the eval workspace's module runs from now on (each still run)."""
    runs: list[list[str]] = []
    real_run = subprocess.run

    def recording(argv, *args, **kwargs):
        runs.append(list(argv))
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(eval_workspace.subprocess, "run", recording)
    return runs


def test_git_reads_the_agents_files_inside_the_sandbox(tmp_path: Path, monkeypatch) -> None:
    on_host = _attempt(tmp_path / "host", None)
    try:
        expected = collect_patch(on_host)
    finally:
        on_host.remove()
    folder = _attempt(tmp_path / "sandboxed", SandboxSettings())
    runs = _record_runs(monkeypatch)
    try:
        patch = collect_patch(folder)
    finally:
        folder.remove()
    assert runs, "no git ran"
    for argv in runs:
        assert BWRAP in argv, argv
        assert "--unshare-net" in argv, argv
        assert "--unshare-user" in argv, argv
        assert "git" in argv
    assert patch.text == expected.text
    assert patch.touched == expected.touched
    assert "+two" in patch.text
    assert "GIT binary patch" in patch.text
    assert "diff --git a/host b/host\nnew file mode 120000" in patch.text


def test_git_on_the_host_when_the_attempt_has_no_sandbox(tmp_path: Path, monkeypatch) -> None:
    folder = _attempt(tmp_path, SandboxSettings(kind="none"))
    runs = _record_runs(monkeypatch)
    try:
        collect_patch(folder)
    finally:
        folder.remove()
    assert runs
    assert all(argv[0] == "git" for argv in runs)
