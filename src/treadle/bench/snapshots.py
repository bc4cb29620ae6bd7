"""``treadle bench snapshots``: workspace snapshots on a large workspace (floors at 10,000
files, 100 MB, 10 files changed per batch): the time of a snapshot per batch, the bytes it adds
to the store against the bytes changed, the time to restore 10 changed files; and, in the same
run, ``git add -A && git commit`` of the same changes on a copy of the workspace."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from treadle.data.settings import SnapshotSettings
from treadle.events.model import SystemPromptEvent
from treadle.runtime.log import ConversationLog
from treadle.runtime.snapshots.gitstore import GitSnapshotStore
from treadle.runtime.snapshots.restore import restore
from treadle.runtime.snapshots.workspace import WorkspaceSnapshots
from treadle.store.urls import open_store


def _disk_bytes(folder: Path) -> int:
    total = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(parent, name)).st_size
    return total


def _make_workspace(root: Path, files: int, total_bytes: int, rng: random.Random) -> list[Path]:
    """``files`` files in 100 folders, ``total_bytes`` in all, of text-like random content (so
    compression does what it does on source code, neither more nor less)."""
    size = max(1, total_bytes // files)
    words = [f"{rng.getrandbits(32):08x}" for _ in range(4096)]
    paths = []
    for number in range(files):
        folder = root / f"pkg{number % 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"module{number}.py"
        path.write_bytes(_content(rng, words, size))
        paths.append(path)
    return paths


def _content(rng: random.Random, words: list[str], size: int) -> bytes:
    text = " ".join(rng.choices(words, k=size // 9 + 1))
    return text.encode()[:size]


def _git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
        cwd=folder,
        check=True,
        capture_output=True,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(folder),
        },
    )


def run_snapshots_bench(
    files: int = 10_000, total_bytes: int = 100_000_000, batches: int = 10, changed: int = 10
) -> dict[str, Any]:
    rng = random.Random(14)
    with tempfile.TemporaryDirectory(prefix="treadle-bench-snapshots-") as temporary:
        base = Path(temporary)
        workspace = base / "workspace"
        paths = _make_workspace(workspace, files, total_bytes, rng)
        size = max(1, total_bytes // files)
        words = [f"{rng.getrandbits(32):08x}" for _ in range(4096)]

        copy = base / "git-copy"
        shutil.copytree(workspace, copy, symlinks=True)
        begin = time.perf_counter()
        _git(copy, "init", "-q")
        _git(copy, "add", "-A")
        _git(copy, "commit", "-q", "-m", "first")
        git_first_s = time.perf_counter() - begin

        store = open_store(f"sqlite:///{base / 'bench.db'}?durability=fast")
        info = store.create_conversation(title="bench snapshots")
        log = ConversationLog(store, info.id)
        log.append([SystemPromptEvent(text="bench", tools=())])
        objects = GitSnapshotStore(base / "bench.db.snapshots")
        snapshots = WorkspaceSnapshots(objects, workspace, SnapshotSettings(), store.url)
        begin = time.perf_counter()
        first = snapshots.record(log)
        first_s = time.perf_counter() - begin
        assert first is not None

        snapshot_ms: list[float] = []
        git_ms: list[float] = []
        added: list[int] = []
        growth: list[int] = []
        git_growth: list[int] = []
        changed_bytes: list[int] = []
        ids = [str(first["id"])]
        for _batch in range(batches):
            chosen = rng.sample(range(files), changed)
            written = 0
            for number in chosen:
                content = _content(rng, words, size)
                written += len(content)
                paths[number].write_bytes(content)
                (copy / paths[number].relative_to(workspace)).write_bytes(content)
            changed_bytes.append(written)
            disk = _disk_bytes(objects.git_dir)
            begin = time.perf_counter()
            value = snapshots.record(log)
            snapshot_ms.append((time.perf_counter() - begin) * 1000)
            assert value is not None
            assert value["changed_count"] == changed
            ids.append(str(value["id"]))
            added.append(int(value["bytes_added"]))
            growth.append(_disk_bytes(objects.git_dir) - disk)
            git_disk = _disk_bytes(copy / ".git")
            begin = time.perf_counter()
            _git(copy, "add", "-A")
            _git(copy, "commit", "-q", "-m", "batch")
            git_ms.append((time.perf_counter() - begin) * 1000)
            git_growth.append(_disk_bytes(copy / ".git") - git_disk)

        # Restore of the last batch's 10 changed files: the whole restore (a snapshot of the
        # files as they are first, the journal, the two facts, the files written) ...
        begin = time.perf_counter()
        result = restore(snapshots, log, ids[-2])
        restore_ms = (time.perf_counter() - begin) * 1000
        assert len(result.changed) == changed
        # ... and git's own checkout of the previous commit on the copy, for scale.
        begin = time.perf_counter()
        _git(copy, "checkout", "-q", "HEAD~1", "--", ".")
        git_checkout_ms = (time.perf_counter() - begin) * 1000
        store.close()

    median = statistics.median(snapshot_ms)
    git_median = statistics.median(git_ms)
    return {
        "files": files,
        "workspace_bytes": total_bytes,
        "batches": batches,
        "files_changed_per_batch": changed,
        "first_snapshot_s": round(first_s, 3),
        "git_first_add_commit_s": round(git_first_s, 3),
        "snapshot_ms_median": round(median, 1),
        "snapshot_ms_max": round(max(snapshot_ms), 1),
        "git_add_commit_ms_median": round(git_median, 1),
        "snapshot_vs_git_commit": round(median / git_median, 3),
        "bytes_changed_per_batch": int(statistics.mean(changed_bytes)),
        "bytes_added_per_batch": int(statistics.mean(added)),
        "disk_growth_per_batch": int(statistics.mean(growth)),
        "git_disk_growth_per_batch": int(statistics.mean(git_growth)),
        "restore_10_files_ms": round(restore_ms, 1),
        "git_checkout_10_files_ms": round(git_checkout_ms, 1),
    }
