"""LocalWorkspace: resolve keeps paths inside the folder; clear errors for bad folders and paths."""

import os
from pathlib import Path

import pytest

from treadle.runtime.workspace import (
    LocalWorkspace,
    PathOutsideWorkspaceError,
    WorkspaceError,
    WorkspacePathError,
)


def test_relative_and_absolute_paths_inside(workspace: LocalWorkspace) -> None:
    root = workspace.root
    assert workspace.resolve("a/b.txt") == root / "a" / "b.txt"
    assert workspace.resolve(root / "a") == root / "a"
    assert workspace.resolve("a/../c") == root / "c"
    assert workspace.resolve(".") == root
    assert workspace.display(root / "a" / "b.txt") == "a/b.txt"
    assert workspace.display(root) == "."


def test_escapes_are_refused_with_the_reason(workspace: LocalWorkspace, tmp_path: Path) -> None:
    with pytest.raises(PathOutsideWorkspaceError) as dotdot:
        workspace.resolve("../x")
    assert str(dotdot.value) == (
        f"'../x' is outside the workspace {workspace.root} (it resolves to {tmp_path / 'x'}); "
        "use a path inside the workspace (relative paths start at its root)"
    )
    os.symlink("/etc", workspace.root / "etc-link")
    with pytest.raises(PathOutsideWorkspaceError, match="a symlink inside it leads to /etc/hosts"):
        workspace.resolve("etc-link/hosts")
    os.symlink(tmp_path / "dangling-target", workspace.root / "dangling")
    with pytest.raises(PathOutsideWorkspaceError):
        workspace.resolve("dangling")
    assert isinstance(dotdot.value, ValueError)  # the tool boundary turns it into an agent error


def test_bad_paths_and_folders(tmp_path: Path, workspace: LocalWorkspace) -> None:
    with pytest.raises(WorkspacePathError, match="the path is empty"):
        workspace.resolve(" ")
    with pytest.raises(WorkspaceError, match="does not exist: create it first or pass create=True"):
        LocalWorkspace(tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(WorkspaceError, match="is not a folder"):
        LocalWorkspace(tmp_path / "file")


def test_a_workspace_root_is_checked_by_real_path_on_open_and_on_every_resolve(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (root / "ws").mkdir(parents=True)
    os.symlink(outside, root / "link")
    with pytest.raises(WorkspaceError, match="outside the workspace root"):
        LocalWorkspace(root / "link", within=root)
    with pytest.raises(WorkspaceError, match="outside the workspace root"):
        LocalWorkspace(root / "link" / "new", within=root, create=True)
    assert not (outside / "new").exists()  # refused before anything was created

    workspace = LocalWorkspace(root / "ws", within=root)
    assert workspace.resolve("a.txt") == root.resolve() / "ws" / "a.txt"
    (root / "ws").rmdir()
    os.symlink(outside, root / "ws")  # the folder swapped for a link after opening
    with pytest.raises(PathOutsideWorkspaceError, match="outside the workspace root"):
        workspace.resolve("a.txt")
    with pytest.raises(PathOutsideWorkspaceError, match="outside the workspace root"):
        workspace.resolve(".")
