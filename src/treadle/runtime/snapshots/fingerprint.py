"""A work tree's stat fingerprint: whether anything a snapshot reads changed since the last one,
told without starting git.

Most agent steps change no file (a test run, a search, an ``echo``), yet each snapshot walked the
work tree twice in git processes (what changed, what is ignored): two process starts, about half
of a step's whole CPU. The fingerprint is one in-process walk hashing every entry's ``lstat``
(mode, inode, size, mtime, ctime), folders included, skipping what the last snapshot found
ignored and nested repositories (never recorded: a store's database in the workspace may
change at every step; their coming and going changes their folder's times, which are hashed).

It errs only towards "changed" (then git walks as before):

- A write always moves ``ctime``, which no unprivileged program can set back (``touch -d``
  moves ``mtime`` only), so an edit that keeps size and ``mtime`` still shows.
- File times come from a clock that ticks (a few milliseconds; whole seconds on some file
  systems): an entry whose times are not well older than the snapshot's start may be written
  again within the same tick unseen, so such a fingerprint is not trusted (``None``) and the
  next snapshot walks with git again; a second or two later the times are old and it holds.
  git's own index calls this "racily clean" and does the same.
- A work tree past ``MAX_ENTRIES`` is not fingerprinted at all: a changed one would pay the walks
  beside git's.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Collection
from pathlib import Path

MAX_ENTRIES = 500
"""Past this many entries the walk gives up. A take whose workspace changed pays two walks (the
check, then the record after git) beside git's: measured here, ~0.8 ms a walk at 200 entries
against git's ~12 ms take, ~7 ms at 500 against ~15 ms, ~15-23 ms at 2,000 against ~38 ms; past
a few hundred entries, a workspace that changes at every step would pay nearly double."""
FINE_MARGIN_NS = 100_000_000
"""How much older than the snapshot's start an entry's times must be on a file system keeping
nanoseconds (the kernel's file clock lags and ticks by a few milliseconds)."""
COARSE_MARGIN_NS = 3_000_000_000
"""The same on one keeping whole seconds (FAT keeps two)."""


def fingerprint(work_tree: Path, skip: Collection[str], *, started_ns: int) -> bytes | None:
    """The work tree's fingerprint, or None when it cannot be trusted (an entry changed too
    close to ``started_ns``, the snapshot's start by ``time.time_ns()``; an entry vanished or
    could not be read while walking; more than ``MAX_ENTRIES``). ``skip``: paths relative to
    the work tree (``a/b``) neither hashed nor walked (what the snapshot found ignored, nested
    repositories), as is every entry named ``.git`` (git never records one); a change inside
    them is no change to the snapshot, and their coming and going shows in their folder."""
    state = _Walk(skip)
    try:
        root = os.open(work_tree, _OPEN_FOLDER)
    except OSError:
        return None
    try:
        info = os.fstat(root)
        state.add(b"", info)
        if not state.walk(root, ""):
            return None
    except OSError:  # vanished or unreadable meanwhile: git will say what it is
        return None
    finally:
        os.close(root)
    margin = COARSE_MARGIN_NS if state.whole_seconds else FINE_MARGIN_NS
    if state.newest >= started_ns - margin:
        return None  # racily clean: a write within the same clock tick would not show
    return state.digest.digest()


_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class _Walk:
    """One fingerprint's walk. Folders are opened by name from their parent's descriptor and
    never through a link (``O_NOFOLLOW``): a folder swapped for a link to elsewhere mid-walk
    fails the open (then the fingerprint is None) instead of walking the link's target."""

    def __init__(self, skip: Collection[str]) -> None:
        self.skip = skip
        self.digest = hashlib.blake2b(digest_size=20)
        self.newest = 0
        self.whole_seconds = True
        self.count = 0

    def add(self, path: bytes, info: os.stat_result) -> None:
        self.newest = max(self.newest, info.st_mtime_ns, info.st_ctime_ns)
        self.whole_seconds = self.whole_seconds and info.st_ctime_ns % 1_000_000_000 == 0
        fields = (info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        self.digest.update(path + b"\0" + b",".join(b"%d" % value for value in fields) + b"\n")

    def walk(self, folder: int, relative: str) -> bool:
        """Hash the entries under the open ``folder`` (False: too many to be worth it)."""
        # An explicit stack, not recursion: a hostile tree may nest thousands deep.
        stack = [(folder, relative, self._listing(folder))]
        opened: list[int] = []
        try:
            while stack:
                descriptor, prefix, entries = stack[-1]
                if not entries:
                    stack.pop()
                    if opened and opened[-1] == descriptor:
                        os.close(opened.pop())
                    continue
                entry = entries.pop()
                path = f"{prefix}/{entry.name}" if prefix else entry.name
                if entry.name == ".git" or path in self.skip:
                    continue  # its coming and going moves the folder's times, hashed
                self.count += 1
                if self.count > MAX_ENTRIES:
                    return False
                info = entry.stat(follow_symlinks=False)
                self.add(os.fsencode(path), info)
                if stat.S_ISDIR(info.st_mode):
                    child = os.open(entry.name, _OPEN_FOLDER, dir_fd=descriptor)
                    opened.append(child)
                    stack.append((child, path, self._listing(child)))
            return True
        finally:
            for descriptor in opened:
                os.close(descriptor)

    @staticmethod
    def _listing(folder: int) -> list[os.DirEntry[str]]:
        """The folder's entries, last name first (popped in name order)."""
        with os.scandir(folder) as listing:
            return sorted(listing, key=lambda entry: entry.name, reverse=True)


def now_ns() -> int:
    """The clock ``started_ns`` is read from (the one file times are set by)."""
    return time.time_ns()
