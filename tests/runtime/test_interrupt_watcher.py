"""The interrupt watchers of a process share one polling thread: it exists while any watcher
is entered and is gone when the last one leaves; each watcher calls back once, on its own
first yes, never after its exit; a failing check is retried."""

from __future__ import annotations

import threading
import time

from treadle.runtime.interrupts import InterruptWatcher


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "treadle-interrupt-watch"]


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_many_watchers_one_thread_each_called_back_once_on_its_own_yes() -> None:
    flags = [threading.Event() for _ in range(50)]
    calls = [0] * 50

    def on_interrupt(index: int) -> None:
        calls[index] += 1

    watchers = [
        InterruptWatcher(flag.is_set, lambda i=i: on_interrupt(i), interval_s=0.01)
        for i, flag in enumerate(flags)
    ]
    assert watch_threads() == []
    for watcher in watchers:
        watcher.__enter__()
    try:
        assert len(watch_threads()) == 1
        for index in (3, 17, 42):
            flags[index].set()
        wait_for(lambda: calls[3] and calls[17] and calls[42])
        time.sleep(0.1)  # more polls: a watcher that called back is not asked again
        assert [i for i, n in enumerate(calls) if n] == [3, 17, 42]
        assert max(calls) == 1
    finally:
        for watcher in watchers:
            watcher.__exit__(None, None, None)
    assert watch_threads() == []


def test_no_callback_after_exit_and_the_thread_ends_with_the_last_watcher() -> None:
    asked = threading.Event()
    called: list[str] = []
    with InterruptWatcher(lambda: False, lambda: called.append("a"), interval_s=0.01):
        late = InterruptWatcher(lambda: (asked.set(), True)[1], lambda: called.append("late"))
        with InterruptWatcher(lambda: False, lambda: None, interval_s=0.01):
            pass
        assert len(watch_threads()) == 1  # another watcher is still in
    assert watch_threads() == []
    late.__enter__()
    late.__exit__(None, None, None)  # left before its first poll was due
    time.sleep(0.05)
    assert not asked.is_set()
    assert called == []
    assert watch_threads() == []


def test_a_failing_check_is_retried_until_it_answers() -> None:
    answers = iter([RuntimeError("store away"), RuntimeError("store away"), True])
    called = threading.Event()

    def requested() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with InterruptWatcher(requested, called.set, interval_s=0.01):
        assert called.wait(10)
