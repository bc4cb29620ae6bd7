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
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused(f"{path} is not a regular file")
        return read_bounded(fd, str(path), max_bytes, FileRefused)
    finally:
        os.close(fd)


def read_bounded(
    fd: int, name: str, max_bytes: int, refused: type[Exception] = FileRefused
) -> bytes:
    """The bytes of the open file ``fd`` (named ``name`` in errors), at most ``max_bytes``:
    ``refused`` when it is larger, by its size or by what it still gives (a file growing as it
    is read stops past the limit). The caller owns ``fd``."""
    size = os.fstat(fd).st_size
    if size > max_bytes:
        raise refused(f"{name} has {size} bytes, more than the {max_bytes} allowed")
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = os.read(fd, max_bytes + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise refused(f"{name} has more than the {max_bytes} bytes allowed")
    return b"".join(chunks)
