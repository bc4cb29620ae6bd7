"""An attempt's starting files from a git repository: checked out at the task's commit (a tag
or an id), and a repo or commit that looks like an option is never given to git as one; the
patch never reads through a link the agent made."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from treadle.eval.tasks import EvalTask, TaskFileError, read_task_file
from treadle.eval.workspace import (
    WorkspaceSetupError,
    make_attempt_folder,
    record_baseline,
    workspace_patch,
)


def git(*args: str, cwd: Path) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with two commits: v1 (a.txt "one") and its head (a.txt "two")."""
    path = tmp_path / "repo"
    path.mkdir()
    git("init", "-q", cwd=path)
    (path / "a.txt").write_text("one\n")
    git("add", "a.txt", cwd=path)
    git("commit", "-qm", "one", cwd=path)
    git("tag", "v1", cwd=path)
    (path / "a.txt").write_text("two\n")
    git("commit", "-qam", "two", cwd=path)
    return path


def source(repo: str, commit: str) -> EvalTask:
    return EvalTask(id="t", instruction="go", repo=repo, commit=commit, verify="true")


@pytest.mark.parametrize("commit", ["v1", "HEAD~1", "v1^{commit}"])
def test_the_repository_is_checked_out_at_the_commit(repo, tmp_path, commit):
    folder = make_attempt_folder(source(str(repo), commit), tmp_path / "work")
    try:
        assert (folder.workspace / "a.txt").read_text() == "one\n"
    finally:
        folder.remove()
    by_id = git("rev-parse", "v1", cwd=repo).strip()
    folder = make_attempt_folder(source(str(repo), by_id), tmp_path / "work")
    folder.remove()
    assert not list((tmp_path / "work").iterdir())


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"repo": "--upload-pack=touch /tmp/x;false #://", "commit": "v1"}, "starts with '-'"),
        ({"repo": "https://x/y.git", "commit": "--orphan=x"}, "commit: String should match"),
        ({"repo": "https://x/y.git", "commit": "v1 --force"}, "commit: String should match"),
        ({"repo": "https://x/y.git", "commit": "v1\n"}, "commit: String should match"),
    ],
)
def test_a_repo_or_commit_that_reads_as_an_option_is_refused(tmp_path, fields, said):
    path = tmp_path / "tasks.jsonl"
    task = {"id": "t", "instruction": "go", "verify": "true", **fields}
    path.write_text(json.dumps(task) + "\n")
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:1 \(task 't'\): ") as refused:
        read_task_file(path)
    assert said in str(refused.value)


def test_git_never_takes_a_commit_for_an_option(repo, tmp_path):
    # A task made without the task file's checks: git is told where its options end. Before,
    # "--orphan=x" reached git checkout as an option ("--detach cannot be used with --orphan").
    unchecked = EvalTask.model_construct(
        id="t", instruction="go", repo=str(repo), commit="--orphan=x", verify="true"
    )
    with pytest.raises(WorkspaceSetupError, match=r"cannot find --orphan=x in .*single revision"):
        make_attempt_folder(unchecked, tmp_path / "work")
    assert not list((tmp_path / "work").iterdir())


def test_the_patch_never_reads_through_the_agents_links(tmp_path):
    # With a file that is not UTF-8 changed, each changed path was read to check its text:
    # a link the agent made to /proc/self/pagemap ended the attempt in an OSError (EINVAL);
    # one to a large file would have been read whole into memory.
    start = tmp_path / "start"
    start.mkdir()
    (start / "a.txt").write_text("one\n")
    task = EvalTask(id="t", instruction="go", workspace=str(start), verify="true")
    folder = make_attempt_folder(task, tmp_path / "work")
    try:
        record_baseline(folder)
        (folder.workspace / "a.txt").write_bytes(b"caf\xe9\n")
        (folder.workspace / "link").symlink_to("/proc/self/pagemap")
        patch = workspace_patch(folder)
    finally:
        folder.remove()
    assert "diff --git a/link b/link\nnew file mode 120000" in patch
    assert "+/proc/self/pagemap" in patch
    assert "GIT binary patch" in patch  # a.txt, not UTF-8, travels as binary


def test_a_urls_branch_is_resolved_to_the_commit_it_points_at_now(repo: Path, tmp_path: Path):
    """A repository by URL (file:// here: git's URL path, no network) names a branch or a tag:
    the eval's inputs record the commit it points at, so a branch that moved makes another
    eval id instead of resuming the old one. A full id is taken as it is; a name the remote
    does not have, or a remote that cannot be reached, is kept as given."""
    from treadle.eval.environment import resolved_commit

    url = f"file://{repo}"
    head = git("rev-parse", "HEAD", cwd=repo).strip()
    v1 = git("rev-parse", "v1^{commit}", cwd=repo).strip()
    assert resolved_commit(url, _branch(repo)) == head
    assert resolved_commit(url, "v1") == v1  # a tag, peeled to its commit
    (repo / "a.txt").write_text("three\n")
    git("commit", "-qam", "three", cwd=repo)
    moved = git("rev-parse", "HEAD", cwd=repo).strip()
    assert resolved_commit(url, _branch(repo)) == moved != head
    assert resolved_commit(url, head) == head  # whole: not asked of the remote
    assert resolved_commit(url, "no-such-branch") == "no-such-branch"
    assert resolved_commit(f"file://{tmp_path / 'gone'}", "main") == "main"


def _branch(repo: Path) -> str:
    return git("rev-parse", "--abbrev-ref", "HEAD", cwd=repo).strip()
