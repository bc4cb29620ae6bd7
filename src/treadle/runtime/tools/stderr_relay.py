"""A child's stderr through a pipe of its own (``StderrRelay``), copied to where this process logs.

A child given this process's own stderr (a file: the server's log) could reopen it through
``/proc/self/fd/2`` and read it whole or write into it. Given the write end of a fresh pipe
instead, the most it can reach is its own output. The copy is bounded (``MAX_RELAYED_BYTES``)
and each line is prefixed with the child's name; control characters are shown as ``\\xNN``
so that a child cannot drive the operator's terminal.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from typing import BinaryIO, TextIO

MAX_RELAYED_BYTES = 1024 * 1024
"""What of one child's stderr reaches the log; the rest is read and dropped (said once)."""

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with control characters (ESC, CR, BEL, C1...) but tab and newline escaped."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


class StderrRelay:
    """A pipe whose write end (``writer``) is a child's stderr; a daemon thread copies what
    arrives to ``target``, each line prefixed with ``[name]``, until every writer is closed.
    ``close_writer`` closes this process's copy once the child is started or gone."""

    def __init__(self, name: str, target: TextIO) -> None:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        self.writer: BinaryIO = os.fdopen(write_fd, "wb", buffering=0)
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._name = name
        self._target = target
        self._thread = threading.Thread(target=self._copy, name=f"stderr-{name}", daemon=True)
        self._thread.start()

    def close_writer(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()

    def join(self, timeout: float) -> bool:
        """Wait for the copy to end (every writer closed); False if it has not."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _copy(self) -> None:
        relayed = 0
        pending = b""
        try:
            while chunk := self._reader.read(65536):
                if relayed >= MAX_RELAYED_BYTES:
                    continue
                relayed += len(chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                self._write(lines)
                if relayed >= MAX_RELAYED_BYTES:
                    self._write([pending, b"[stderr cut: more than 1 MiB]"])
                    pending = b""
            if pending:
                self._write([pending])
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self._reader.close()

    def _write(self, lines: list[bytes]) -> None:
        text = "".join(
            f"[{self._name}] {visible(line.decode('utf-8', 'replace'))}\n" for line in lines
        )
        if text:
            with contextlib.suppress(OSError, ValueError):
                self._target.write(text)
                self._target.flush()
