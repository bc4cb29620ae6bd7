"""Reading a file someone named (a script, a key file): only a regular file, only up to a limit,
so a path like /dev/zero or a FIFO can neither fill memory nor block the reader."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from treadle.errors import TreadleError


class FileRefused(TreadleError, ValueError):
    """The named file is not a regular file, or is larger than the reader accepts."""


def read_regular_file(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of ``path``; ``FileRefused`` for anything but a regular file of at most
    ``max_bytes``, ``OSError`` when it cannot be opened."""
    # Type and size come from the opened file itself (fstat), so a path swapped after a check
    # cannot slip a device in; O_NONBLOCK keeps a FIFO from blocking the open.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{path} is not a regular file")
        if info.st_size > max_bytes:
            raise FileRefused(f"{path} has {info.st_size} bytes, more than the {max_bytes} allowed")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:  # a file still growing stops past the limit
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise FileRefused(f"{path} has more than the {max_bytes} bytes allowed")
    return b"".join(chunks)
