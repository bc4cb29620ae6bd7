"""The front's worker processes: each started as ``python -m treadle.server.workers.worker``
with its settings on stdin, listening on a unix socket in a private folder (0700, made by the
front and removed by it; one a killed front left behind is removed by the next front, once its
lock is free), restarted when it dies (its runs are taken over from the store), and stopped
with the front: SIGTERM (its runs pause), SIGKILL after ``STOP_S``. A worker dies with the
front however the front dies (``PR_SET_PDEATHSIG``)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treadle.server.workers.link import Link, WorkerDown

logger = logging.getLogger("uvicorn.error")

PREFIX = "treadle-serve-"
LOCK_NAME = "front.lock"
START_S = 120.0
"""How long the workers may take to start (imports, the store's schema) before serve fails."""
WAIT_S = 30.0
"""How long a request waits for its worker to be up (restarting after a crash)."""
STOP_S = 20.0
"""How long a stopping worker may take to pause its runs before it is killed."""
RESTART_MAX_S = 10.0


def socket_parent() -> Path:
    """Where the socket folders go: the user's runtime folder, else /tmp (not TMPDIR: a unix
    socket's path holds 107 bytes at most)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and len(runtime) < 60:
        return Path(runtime)
    return Path("/tmp")


def sweep_folders(parent: Path | None = None) -> None:
    """Remove the socket folders of fronts that are gone (their lock is free)."""
    parent = parent or socket_parent()
    for folder in parent.glob(f"{PREFIX}*"):
        try:
            if folder.stat().st_uid != os.geteuid():
                continue
            fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live front's
        finally:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class _Slot:
    index: int
    socket: Path
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    link: Link | None = None
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None


class Workers:
    def __init__(self, count: int, settings: dict[str, Any], group: str) -> None:
        """``settings``: what each worker's ``create_app`` is given (and the place added)."""
        self.count = count
        self.settings = settings
        self.group = group
        self.folder: Path | None = None
        self._lock_fd: int | None = None
        self._slots: list[_Slot] = []
        self._stopping = False
        self._next = 0

    def ready_count(self) -> int:
        return sum(slot.ready.is_set() for slot in self._slots)

    async def start(self) -> None:
        sweep_folders()
        self.folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=socket_parent()))  # 0700
        self._lock_fd = os.open(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._slots = [_Slot(i, self.folder / f"worker-{i}.sock") for i in range(self.count)]
        for slot in self._slots:
            slot.task = asyncio.create_task(self._keep(slot))
        async with asyncio.timeout(START_S):
            await asyncio.gather(*(slot.ready.wait() for slot in self._slots))

    async def link(self, index: int | None) -> Link:
        """The link to worker ``index`` (None: the next one up), waiting up to ``WAIT_S`` for
        it while it restarts (TimeoutError past that)."""
        async with asyncio.timeout(WAIT_S):
            while True:
                if index is not None:
                    slot = self._slots[index]
                else:
                    up = [slot for slot in self._slots if slot.ready.is_set()] or self._slots
                    self._next += 1
                    slot = up[self._next % len(up)]
                await slot.ready.wait()
                if slot.link is not None:
                    return slot.link

    async def _keep(self, slot: _Slot) -> None:
        pause = 0.5
        while not self._stopping:
            started = time.monotonic()
            try:
                await self._run(slot)
            except Exception:
                logger.exception("worker %d could not be started", slot.index)
            if self._stopping:
                return
            pause = 0.5 if time.monotonic() - started > 30 else min(pause * 2, RESTART_MAX_S)
            await asyncio.sleep(pause)

    async def _run(self, slot: _Slot) -> None:
        slot.socket.unlink(missing_ok=True)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "treadle.server.workers.worker",
            stdin=asyncio.subprocess.PIPE,
        )
        slot.process = process
        try:
            assert process.stdin is not None
            settings = {
                "app": self.settings,
                "socket": str(slot.socket),
                "slot": slot.index,
                "count": self.count,
                "group": self.group,
                "folder": str(self.folder),
                "parent": os.getpid(),
            }
            process.stdin.write(pickle.dumps(settings))
            await process.stdin.drain()
            process.stdin.close()
            while process.returncode is None and not await _answers(slot.socket):
                await asyncio.sleep(0.05)
            if process.returncode is None:
                slot.link = Link(str(slot.socket))
                slot.ready.set()
                logger.info("worker %d (pid %d) is up", slot.index, process.pid)
            code = await process.wait()
        finally:
            slot.ready.clear()
            if slot.link is not None:
                slot.link.close()
                slot.link = None
            slot.socket.unlink(missing_ok=True)
        if not self._stopping:
            logger.warning(
                "worker %d (pid %d) exited (%s); restarting", slot.index, process.pid, code
            )

    async def stop(self) -> None:
        """SIGTERM every worker, SIGKILL those still there after ``STOP_S``; the folder goes."""
        self._stopping = True
        running = [s.process for s in self._slots if s.process and s.process.returncode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        waits = [asyncio.create_task(process.wait()) for process in running]
        if waits:
            _done, late = await asyncio.wait(waits, timeout=STOP_S)
            for process in running:
                if process.returncode is None:
                    logger.warning("worker pid %d did not stop: killed", process.pid)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
            if late:
                await asyncio.wait(late, timeout=5)
        for slot in self._slots:
            if slot.task is not None:
                slot.task.cancel()
        await asyncio.gather(*(s.task for s in self._slots if s.task), return_exceptions=True)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


async def _answers(path: Path) -> bool:
    """Whether a worker listens at ``path`` (uvicorn binds once its app has started)."""
    try:
        _reader, writer = await asyncio.open_unix_connection(str(path))
    except OSError:
        return False
    writer.close()
    return True


__all__ = ["WorkerDown", "Workers", "sweep_folders"]
