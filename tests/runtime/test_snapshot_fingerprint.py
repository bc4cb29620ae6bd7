"""A snapshot of a workspace nothing changed in is answered without git (its stat fingerprint),
and every kind of change still makes git walk it: an edit keeping size and mtime, new files and
folders, deletions, ignore rules, links, files shrinking under the size limit, changes in the
same clock tick as the snapshot. Real git, real files; the spawns are counted, not timed."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import time
from pathlib import Path

import pytest

from treadle.runtime.snapshots import fingerprint as fingerprint_module
from treadle.runtime.snapshots.fingerprint import FINE_MARGIN_NS, fingerprint, now_ns
from treadle.runtime.snapshots.gitstore import GitSnapshotStore, SnapshotError

SETTLE_S = FINE_MARGIN_NS / 1e9 + 0.05
"""Long enough for every file time to be older than a snapshot's margin (no racy entries)."""


class Counting(GitSnapshotStore):
    """The real store, counting the git processes it starts."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.spawns = 0

    def _run(self, args, **kwargs):  # type: ignore[no-untyped-def]
        self.spawns += 1
        return super()._run(args, **kwargs)

    def _start(self, args, **kwargs):  # type: ignore[no-untyped-def]
        self.spawns += 1
        return super()._start(args, **kwargs)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "workspace"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "app.py").write_text("print('hello')\n")
    (folder / "README").write_text("readme\n")
    (folder / ".gitignore").write_text("notes.txt\n")
    (folder / "notes.txt").write_text("ignored\n")
    return folder


@pytest.fixture
def store(tmp_path: Path) -> Counting:
    return Counting(tmp_path / "store")


def settled_take(store: Counting, workspace: Path, **rules):  # type: ignore[no-untyped-def]
    """A take once every file is old enough to be trusted, so the next one may skip git."""
    time.sleep(SETTLE_S)
    taken = store.take(workspace, **rules)
    store.spawns = 0
    return taken


def test_an_unchanged_workspace_starts_no_git_and_gives_the_same_tree(store, workspace):
    first = settled_take(store, workspace)
    for _ in range(3):
        again = store.take(workspace, previous=first.id)
        assert (again.id, again.files, again.changed, again.bytes_added) == (first.id, 3, [], 0)
    assert store.spawns == 0


def test_a_previous_tree_other_than_the_last_counts_the_changes_since_it(store, workspace):
    old = settled_take(store, workspace)
    (workspace / "README").write_text("readme, longer\n")
    new = settled_take(store, workspace)
    again = store.take(workspace, previous=old.id)
    assert again.id == new.id
    assert again.changed == ["README"]


def test_fresh_files_are_never_trusted(store, workspace, monkeypatch):
    """Within the margin of their last change, a write in the same clock tick would not show.
    (The margin is made an hour: however slow the machine, every file here is fresh.)"""
    monkeypatch.setattr(fingerprint_module, "FINE_MARGIN_NS", 3600 * 10**9)
    monkeypatch.setattr(fingerprint_module, "COARSE_MARGIN_NS", 3600 * 10**9)
    store.take(workspace)
    store.spawns = 0
    store.take(workspace)
    assert store.spawns > 0


def _edit_keeping_size_and_mtime(workspace: Path) -> None:
    path = workspace / "src" / "app.py"
    before = os.stat(path)
    path.write_text("print('HELLO')\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _new_file(workspace: Path) -> None:
    (workspace / "src" / "new.py").write_text("x = 1\n")


def _file_in_new_folder(workspace: Path) -> None:
    (workspace / "src" / "deep" / "er").mkdir(parents=True)
    (workspace / "src" / "deep" / "er" / "leaf.txt").write_text("leaf\n")


def _delete(workspace: Path) -> None:
    (workspace / "README").unlink()


def _ignore_rule_dropped(workspace: Path) -> None:
    """``notes.txt`` was ignored (so never hashed): dropping the rule records it."""
    (workspace / ".gitignore").write_text("")


def _link_swap(workspace: Path) -> None:
    (workspace / "README").unlink()
    (workspace / "README").symlink_to("src/app.py")


def _chmod(workspace: Path) -> None:
    os.chmod(workspace / "src" / "app.py", 0o755)


CHANGES = {
    "edit keeping size and mtime": (_edit_keeping_size_and_mtime, ["src/app.py"]),
    "new file": (_new_file, ["src/new.py"]),
    "file in a new folder": (_file_in_new_folder, ["src/deep/er/leaf.txt"]),
    "deleted file": (_delete, ["README"]),
    "ignore rule dropped": (_ignore_rule_dropped, [".gitignore", "notes.txt"]),
    "file swapped for a link": (_link_swap, ["README"]),
    "executable bit": (_chmod, ["src/app.py"]),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_is_seen(store, workspace, change):
    make, changed = CHANGES[change]
    first = settled_take(store, workspace)
    store.take(workspace)  # answered by the fingerprint
    assert store.spawns == 0
    make(workspace)  # at once: the same clock tick as the snapshot, often
    after = store.take(workspace, previous=first.id)
    assert store.spawns > 0
    assert sorted(after.changed) == sorted(changed)
    assert after.id != first.id


def test_a_file_shrinking_under_the_size_limit_is_recorded(store, workspace):
    big = workspace / "big.bin"
    big.write_bytes(b"x" * 200)
    first = settled_take(store, workspace, max_file_bytes=100)
    assert any("big.bin" in line for line in first.skipped)
    big.write_bytes(b"x" * 50)
    after = store.take(workspace, previous=first.id, max_file_bytes=100)
    assert after.changed == ["big.bin"]


def test_other_rules_walk_again(store, workspace):
    settled_take(store, workspace)
    store.take(workspace, exclude=["*.log"])
    assert store.spawns > 0
    settled_take(store, workspace, exclude=["*.log"])
    store.take(workspace, exclude=["*.log"])
    assert store.spawns == 0


def test_what_is_never_recorded_changing_is_no_change(store, workspace):
    """The store's own database inside the workspace changes at every step."""
    database = workspace / ".treadle" / "events.db"
    database.parent.mkdir()
    database.write_bytes(b"0")
    ignored = workspace / "build"
    ignored.mkdir()
    (workspace / ".gitignore").write_text("build/\n")
    first = settled_take(store, workspace, never=[database.parent])
    database.write_bytes(b"01")
    (ignored / "out.o").write_bytes(b"object")
    again = store.take(workspace, previous=first.id, never=[database.parent])
    assert store.spawns == 0
    assert again.id == first.id


def test_a_nested_repository_is_not_walked(store, workspace):
    nested = workspace / "vendor"
    nested.mkdir()
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    (nested / "lib.py").write_text("lib\n")
    first = settled_take(store, workspace)
    assert any("vendor/" in line for line in first.skipped)
    (nested / "lib.py").write_text("lib changed\n")
    store.take(workspace)
    assert store.spawns == 0


def test_another_writer_of_the_index_walks_again(store, workspace, tmp_path):
    first = settled_take(store, workspace)
    other = GitSnapshotStore(tmp_path / "store")  # another process, say
    (workspace / "README").write_text("changed\n")
    other.take(workspace)
    (workspace / "README").write_text("readme\n")  # back as it was: the index moved
    time.sleep(SETTLE_S)
    store.spawns = 0
    again = store.take(workspace, previous=first.id)
    assert store.spawns > 0
    assert again.id == first.id


def test_a_restore_is_seen_by_the_next_snapshot(store, workspace):
    first = settled_take(store, workspace)
    (workspace / "README").write_text("second version\n")
    second = settled_take(store, workspace)
    store.checkout(workspace, store.changes(second.id, first.id))
    assert store.take(workspace).id == first.id


def test_past_the_entry_limit_no_fingerprint(workspace, monkeypatch):
    monkeypatch.setattr(fingerprint_module, "MAX_ENTRIES", 2)
    time.sleep(SETTLE_S)
    assert fingerprint(workspace, (), started_ns=now_ns()) is None


def test_a_folder_swapped_for_a_link_is_not_walked_through(workspace, tmp_path):
    """The walk opens folders by name from their parent, never through a link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host file\n")
    time.sleep(SETTLE_S)
    started = now_ns()
    clean = fingerprint(workspace, (), started_ns=started)
    os.rename(workspace / "src", tmp_path / "moved")
    os.symlink(outside, workspace / "src")
    time.sleep(SETTLE_S)
    linked = fingerprint(workspace, (), started_ns=now_ns())
    assert clean is not None
    assert linked is not None
    assert linked != clean
    (outside / "secret").write_text("changed on the host\n")
    time.sleep(SETTLE_S)
    assert fingerprint(workspace, (), started_ns=now_ns()) == linked  # the target: not read


def test_a_deep_tree_is_walked_without_recursion(tmp_path, monkeypatch):
    monkeypatch.setattr(fingerprint_module, "MAX_ENTRIES", 2000)  # (1,500 folders: walked)
    folder = tmp_path / "deep"
    folder.mkdir()
    depth = 1500  # deeper than Python's recursion limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # (one descriptor per level)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    levels = [os.open(folder, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=levels[-1])
            levels.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=levels[-1]))
        time.sleep(SETTLE_S)
        baseline = len(os.listdir("/proc/self/fd"))
        assert fingerprint(folder, (), started_ns=now_ns()) is not None
        assert len(os.listdir("/proc/self/fd")) == baseline  # every folder closed
    finally:
        # Removed here, deepest first: pytest's own (recursive) clean-up could not.
        os.close(levels.pop())
        while levels:
            parent = levels.pop()
            with contextlib.suppress(FileNotFoundError):
                os.rmdir("d", dir_fd=parent)
            os.close(parent)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_kept_tree_is_a_ref_git_reads_and_gc_keeps(store, workspace, tmp_path):
    """``keep`` writes the loose ref itself (no git process): git lists it, a gc spares its
    tree and packs it, and keeping it again after the gc is harmless."""
    taken = settled_take(store, workspace)
    (workspace / "README").write_text("a version no ref keeps\n")
    lost = store.take(workspace)
    store.spawns = 0
    store.keep("conversation/1", taken.id)
    assert store.spawns == 0
    assert store.kept("conversation/1") == [taken.id]
    assert store.owners() == ["conversation/1"]
    store.gc()
    assert store.exists(taken.id)
    assert not store.exists(lost.id)
    store.keep("conversation/1", taken.id)
    assert store.kept("conversation/1") == [taken.id]
    assert store.forget("conversation/1") == 1
    assert store.kept("conversation/1") == []


def test_a_name_git_would_refuse_is_left_to_git(store, workspace):
    settled_take(store, workspace)
    with pytest.raises(SnapshotError):
        store.keep("conversation", "not-a-tree-id")
