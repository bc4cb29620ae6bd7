"""The interrupt watchers of a process share one polling thread: it exists while any watcher
is entered and is gone when the last one leaves; each watcher calls back once, on its own
first yes, never after its exit; a failing check is retried."""

from __future__ import annotations

import threading
import time

from treadle.events.model import MessageEvent
from treadle.runtime.interrupts import InterruptWatcher
from treadle.store.base import EventStore, StoreUnavailable
from treadle.store.urls import open_store


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
        InterruptWatcher(
            lambda _top, flag=flag: flag.is_set(), lambda i=i: on_interrupt(i), interval_s=0.01
        )
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
    with InterruptWatcher(lambda _top: False, lambda: called.append("a"), interval_s=0.01):
        late = InterruptWatcher(lambda _top: (asked.set(), True)[1], lambda: called.append("late"))
        with InterruptWatcher(lambda _top: False, lambda: None, interval_s=0.01):
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

    def requested(_top: int | None) -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with InterruptWatcher(requested, called.set, interval_s=0.01):
        assert called.wait(10)


class CountedReads:
    """A real store, each read of a log's end recorded (which conversations it asked for)."""

    def __init__(self, store: EventStore, *, failing: bool = False) -> None:
        self.store = store
        self.failing = failing
        self.asked: list[list[str]] = []

    def event_counts(self, conversation_ids: list[str]) -> dict[str, int]:
        self.asked.append(list(conversation_ids))
        if self.failing:
            raise StoreUnavailable("the store is away")
        return self.store.event_counts(conversation_ids)


def test_the_watchers_of_one_store_read_their_logs_ends_in_one_query(tmp_path) -> None:
    """Entered at different moments, watchers of one interval come due together; the thread
    reads every due log's last seq in one query and gives each its own."""
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    ids = [store.create_conversation(f"c{n}").id for n in range(20)]
    reads = CountedReads(store)
    tops: dict[str, list[int | None]] = {cid: [] for cid in ids}

    def watcher(cid: str) -> InterruptWatcher:
        def requested(top: int | None) -> bool:
            tops[cid].append(top)
            return False

        return InterruptWatcher(requested, lambda: None, interval_s=0.05, log=(reads, cid))

    watchers = [watcher(cid) for cid in ids]
    try:
        for entered in watchers:
            entered.__enter__()
            time.sleep(0.005)  # spread over two intervals
        store.append_batch("c7", [MessageEvent(source="user", text=t) for t in "abc"])
        wait_for(lambda: all(len(seen) >= 3 for seen in tops.values()))
        wait_for(lambda: tops["c7"][-1] == 2)
        assert all(seen[-1] == -1 for cid, seen in tops.items() if cid != "c7")
        assert sorted(reads.asked[-1]) == sorted(ids)  # the last round: all of them in one read
    finally:
        for entered in watchers:
            entered.__exit__(None, None, None)
        store.close()


def test_a_failed_read_of_the_ends_leaves_each_watcher_to_read_its_own(tmp_path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    store.create_conversation("c")
    reads = CountedReads(store, failing=True)
    asked: list[int | None] = []
    interrupted = threading.Event()

    def requested(top: int | None) -> bool:
        asked.append(top)
        return len(asked) >= 3

    try:
        with InterruptWatcher(requested, interrupted.set, interval_s=0.01, log=(reads, "c")):
            assert interrupted.wait(10)
        assert asked == [None, None, None]  # each read its own log's end
        assert len(reads.asked) >= 3
    finally:
        store.close()
