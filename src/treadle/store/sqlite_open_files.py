"""The SQLite store files this process has open, so that nothing reads one outside SQLite
while it does.

POSIX file locks belong to a process, not to a descriptor: closing *any* descriptor of a file
drops every lock the process holds on it. A read of a store's header with ``open()``, or an
``immutable=1`` connection (which SQLite does not count among the file's users), closed while
this process's stores have the file open, silently drops their locks; another process that
then closes its own connection believes it is the last one, checkpoints and deletes the WAL,
and the appends this process acknowledged afterwards go to a deleted file: lost. So the
checks a store makes before SQLite opens a file (``sqlite_schema.read_schema_version``) run
only while no store of this process has that file open, under one lock (``opening``); a store
that finds the file open here already skips them (the store that opened it first checked and
migrated it).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FileIdentity = tuple[int, int]
"""(device, inode): the file, whatever path names it."""

_lock = threading.RLock()
_open: Counter[FileIdentity] = Counter()


def identity_of(path: Path) -> FileIdentity | None:
    """The identity of the file at ``path``; None when there is none."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


@contextmanager
def opening(path: Path) -> Iterator[bool]:
    """Held while a store opens ``path`` (call ``add`` inside it once it is open): True when
    no store of this process has the file open, so it may be read outside SQLite."""
    with _lock:
        identity = identity_of(path)
        yield identity is None or identity not in _open


def add(identity: FileIdentity) -> None:
    """A store of this process has the file ``identity`` open."""
    with _lock:
        _open[identity] += 1


def discard(identity: FileIdentity) -> None:
    """A store of this process closed the file ``identity``."""
    with _lock:
        _open[identity] -= 1
        if _open[identity] <= 0:
            del _open[identity]


def open_here(identity: FileIdentity) -> bool:
    """Whether a store of this process has the file ``identity`` open."""
    with _lock:
        return identity in _open
