"""``--max-running`` across all the workers of one ``treadle serve``: as many lock files as
the limit, in the front's private folder; a run holds one (``flock``) while it runs. The
kernel drops a dead worker's locks, so a crash never leaks a place."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

MOST_FILES = 512
"""Past this --max-running, each worker is given its share instead (a file each is too many)."""


class RunSlots:
    def __init__(self, folder: Path, count: int) -> None:
        self._fds = [
            os.open(folder / f"run-{i}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            for i in range(count)
        ]
        self._held: set[int] = set()
        self._lock = threading.Lock()

    def take(self) -> int | None:
        """A place for one more run in this server, or None when all are taken."""
        with self._lock:
            for index, fd in enumerate(self._fds):
                if index in self._held:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                self._held.add(index)
                return index
        return None

    def give(self, index: int) -> None:
        with self._lock:
            if index in self._held:
                fcntl.flock(self._fds[index], fcntl.LOCK_UN)
                self._held.discard(index)
