"""The one thread that starts long-lived sandboxed processes (a conversation's terminal shell).

bubblewrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, and Linux sends that signal when
the *thread* that forked the process exits, not the process. A shell forked by a server's run
thread therefore died when that run ended (its cwd, variables and background jobs lost, a zombie
bwrap left until the idle timeout). So such processes are forked here, by one process-wide
thread that lives as long as the process: the shell then belongs to the conversation that
holds it, lives across runs until that conversation closes it, and still dies with the process
(every thread ends then).

Only the fork/exec happens on this thread; waiting for and killing the process is done by its
owner from any thread (``waitpid`` is per process). Short-lived commands a thread starts and
waits for (hooks, eval commands) need none of this.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

THREAD_NAME = "treadle-sandbox-spawner"
_MAIN_THREAD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class _Spawner:
    """A lazily started daemon thread running the callables it is given, one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]
        self._jobs = queue.SimpleQueue()

    def _serve(self) -> None:
        while True:
            # Idle with the process's signals blocked: Linux gives a process-directed signal
            # to any thread that does not block it, and Python's handler only runs on the main
            # thread, so a Ctrl-C landing here left `chat`'s prompt (blocked reading the
            # terminal) waiting for a key. Unblocked while a job forks: the mask is inherited.
            signal.pthread_sigmask(signal.SIG_BLOCK, _MAIN_THREAD_SIGNALS)
            job, future = self._jobs.get()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _MAIN_THREAD_SIGNALS)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as error:  # handed to the caller, who raises it
                future.set_exception(error)

    def _ensure(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                # Daemon: it never keeps the interpreter alive; it ends with the process, and
                # with it every sandbox it started (their parent-death signal).
                self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
                self._thread.start()

    def call(self, job: Callable[[], T], undo: Callable[[T], None] | None = None) -> T:
        """``job()`` run on the spawner thread; its result or exception. When the caller is
        interrupted while waiting (Ctrl-C), ``undo`` gets the result once it comes, so that
        nothing started for it is left without an owner."""
        if threading.current_thread() is self._thread:
            return job()
        self._ensure()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((job, future))
        try:
            return future.result()
        except BaseException:
            if undo is not None and not future.cancel():
                future.add_done_callback(lambda done: _undo_result(done, undo))
            raise

    def _after_fork(self) -> None:
        """A forked child has no spawner thread (only the forking thread survives a fork)."""
        self._lock = threading.Lock()
        self._thread = None
        self._jobs = queue.SimpleQueue()


def _undo_result(done: concurrent.futures.Future[T], undo: Callable[[T], None]) -> None:
    if done.cancelled() or done.exception() is not None:
        return
    with contextlib.suppress(Exception):
        undo(done.result())


_SPAWNER = _Spawner()
os.register_at_fork(after_in_child=_SPAWNER._after_fork)


def spawner_thread() -> threading.Thread | None:
    """The spawner thread, once started (tests check who forked a shell)."""
    return _SPAWNER._thread


def popen(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **options)`` forked by the spawner thread, so that the
    process's parent-death signal is tied to the process, not to the calling thread."""
    return _SPAWNER.call(lambda: subprocess.Popen(argv, **options), undo=_kill)


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        process.kill()
    process.wait()
