"""Snapshot restore writes and removes through the workspace's descriptor (issue 22, item 2):
a folder swapped for a link to the host while files are restored never leads the restore out,
whatever is in the way (a FIFO, a link) is replaced, and new files get the workspace's owner."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from treadle.runtime.snapshots.gitstore import GitSnapshotStore, SnapshotError

SECRET = "HOST SECRET"
FILES = 40

_SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop, outside, graves = (os.fsencode(p) for p in sys.argv[1:6])
if libc.renameat2(-100, a, -100, b, 2) != 0:  # RENAME_EXCHANGE
    sys.exit(f"renameat2 failed: {os.strerror(ctypes.get_errno())}")
count, put_back = 1, 0
print("ready", flush=True)  # swapping from now on
while not os.path.exists(stop):
    if all(os.path.isdir(name) and not os.path.islink(name) for name in (a, b)):
        # A restore replaced the link with a real folder (as it should): set the trap again,
        # or the race would be over for good. The old folder goes out of the workspace.
        try:
            os.rename(b, os.path.join(graves, b"%d" % (put_back + 1)))
            os.symlink(outside, b)
            put_back += 1
        except (FileNotFoundError, FileExistsError):
            pass  # the restore moved it meanwhile: look again
    # Phases by the clock, not by a count of swaps: on a loaded machine a count's worth of swaps
    # could fall between two restores, and the race would never meet one.
    until = time.monotonic() + 0.05
    while time.monotonic() < until:
        if libc.renameat2(-100, a, -100, b, 2) == 0:  # RENAME_EXCHANGE
            count += 1
        elif ctypes.get_errno() == 2:
            # The restore replaced the link with a folder (as it should): put a link back.
            for name in (a, b):
                try:
                    os.symlink(outside, name)
                    put_back += 1
                except FileExistsError:
                    pass  # this one is there (the restore may have just made it)
        else:
            sys.exit(f"renameat2 failed: {os.strerror(ctypes.get_errno())}")
    # A calm moment with the real folder in place, so that some restores get through whole
    # (a restore meeting a swap is refused: with swaps only, every one would be).
    if os.path.islink(a) and libc.renameat2(-100, a, -100, b, 2) == 0:
        count += 1
    time.sleep(0.05)
print(count, put_back, flush=True)
"""


@contextlib.contextmanager
def swapping(first: Path, second: Path, outside: Path) -> Iterator[list[int]]:
    """``first`` and ``second`` exchanged in a loop by another process during the block (a
    removed one comes back as a link to ``outside``); the list holds, after, how many swaps
    were made and how often a link was put back."""
    stop = first.parent.parent / "stop-swapping"
    graves = first.parent.parent / "replaced-links"
    graves.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, *map(str, (first, second, stop, outside, graves))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    swaps: list[int] = []
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n", "the swapper did not start"
        yield swaps
    finally:
        stop.touch()
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err.decode()
        swaps.extend(int(number) for number in out.split())
        stop.unlink()


RACE_FOR_S = 120
"""At most this long restoring in the race test (each restore takes a few milliseconds)."""


def host_files(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(folder.iterdir())}


@pytest.fixture
def objects(tmp_path: Path) -> GitSnapshotStore:
    return GitSnapshotStore(tmp_path / "snapshots")


def test_restore_never_writes_or_removes_outside_under_the_race(
    tmp_path: Path, objects: GitSnapshotStore
) -> None:
    workspace = tmp_path / "ws"
    outside = tmp_path / "host"
    (workspace / "d").mkdir(parents=True)
    outside.mkdir()
    for number in range(FILES):  # what an escaping write would change, or a delete remove
        (outside / f"f{number}.txt").write_text(SECRET)
        (outside / f"g{number}.txt").write_text(SECRET)
    (workspace / "l").symlink_to(outside)
    for number in range(FILES):
        (workspace / "d" / f"f{number}.txt").write_text("one\n")
        (workspace / "d" / f"g{number}.txt").write_text("only in one\n")
    one = objects.take(workspace).id
    for number in range(FILES):
        (workspace / "d" / f"f{number}.txt").write_text("two\n")
        (workspace / "d" / f"g{number}.txt").unlink()
    two = objects.take(workspace).id
    before = host_files(outside)
    restored = 0
    refusals: list[str] = []
    with swapping(workspace / "d", workspace / "l", outside) as swaps:
        # Restores until the race has met one (a refusal) and one got through whole, or for up to
        # RACE_FOR_S: how they fall between the swaps and the calm depends on the machine.
        step, deadline = 0, time.monotonic() + RACE_FOR_S
        while time.monotonic() < deadline and not (refusals and restored and step >= 60):
            target, current = (one, two) if step % 2 == 0 else (two, one)
            step += 1
            try:
                objects.checkout(workspace, objects.changes(current, target))
                restored += 1
            except SnapshotError as error:
                refusals.append(str(error))
    assert host_files(outside) == before
    assert all("was refused" in refusal for refusal in refusals), refusals
    assert swaps[0] > 0
    assert restored, "no restore got through: the test proves nothing"
    # The race met the restore: refused, or a link in its way replaced by a real folder.
    assert refusals or swaps[1], "the race never met a restore: the test proves nothing"


def test_restore_replaces_a_fifo_and_a_link_in_the_way(
    tmp_path: Path, objects: GitSnapshotStore
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "host.txt"
    outside.write_text(SECRET)
    (workspace / "a.txt").write_text("a\n")
    (workspace / "b.txt").write_text("b\n")
    (workspace / "run.sh").write_text("#!/bin/sh\n")
    (workspace / "run.sh").chmod(0o755)
    (workspace / "link").symlink_to("a.txt")
    one = objects.take(workspace).id
    for name in ("a.txt", "b.txt", "run.sh", "link"):
        (workspace / name).unlink()
    os.mkfifo(workspace / "a.txt")
    (workspace / "b.txt").symlink_to(outside)
    two = objects.take(workspace).id
    objects.checkout(workspace, objects.changes(two, one))
    assert (workspace / "a.txt").read_text() == "a\n"
    assert not (workspace / "b.txt").is_symlink()
    assert (workspace / "b.txt").read_text() == "b\n"
    assert outside.read_text() == SECRET
    assert os.readlink(workspace / "link") == "a.txt"
    assert (workspace / "run.sh").stat().st_mode & 0o111
    assert objects.take(workspace).id == one  # the index agrees with the files again


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_restored_files_belong_to_the_workspace_owner(
    tmp_path: Path, objects: GitSnapshotStore
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "deep").mkdir(parents=True)
    (workspace / "deep" / "a.txt").write_text("a\n")
    one = objects.take(workspace).id
    (workspace / "deep" / "a.txt").unlink()
    (workspace / "deep").rmdir()
    two = objects.take(workspace).id
    os.chown(workspace, 4321, 4322)
    objects.checkout(workspace, objects.changes(two, one))
    for made in ("deep", "deep/a.txt"):
        info = (workspace / made).lstat()
        assert (info.st_uid, info.st_gid) == (4321, 4322), made
