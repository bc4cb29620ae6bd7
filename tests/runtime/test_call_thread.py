"""The model calls' thread (runtime/interrupts.py ``CallThread``): one worker kept between calls,
a fresh one when a call was abandoned, and no thread left once closed or idle."""

from __future__ import annotations

import threading

import pytest

from support.waiting import wait_until
from treadle.runtime.interrupts import Abandoned, CallThread, result_unless_interrupted
from treadle.runtime.status import ConversationStatus as Status

from .test_conversation import FINISH, call, scripted

NAME = "treadle-test-calls"


def workers(name: str = NAME) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == name]


def test_successive_calls_run_on_one_thread_that_close_ends():
    calls = CallThread(NAME)
    try:
        idents = {calls.submit(threading.get_ident).result(timeout=10) for _ in range(20)}
        assert len(idents) == 1
        assert threading.get_ident() not in idents
        assert len(workers()) == 1
    finally:
        calls.close()
    assert workers() == []


def test_a_failing_call_hands_its_error_to_the_future_and_the_thread_goes_on():
    calls = CallThread(NAME)
    try:

        def fail() -> None:
            raise ValueError("the model broke")

        with pytest.raises(ValueError, match="the model broke"):
            calls.submit(fail).result(timeout=10)
        assert calls.submit(lambda: "still here").result(timeout=10) == "still here"
        assert len(workers()) == 1
    finally:
        calls.close()
    assert workers() == []


def test_an_abandoned_call_keeps_its_thread_and_the_next_call_gets_a_fresh_one():
    calls = CallThread(NAME)
    release = threading.Event()
    interrupted = threading.Event()
    interrupted.set()
    try:
        stuck = calls.submit(lambda: release.wait(30))
        with pytest.raises(Abandoned):
            result_unless_interrupted(stuck, interrupted, grace_s=0)
        # The stuck call still runs; the next one is not queued behind it.
        assert calls.submit(lambda: "answered").result(timeout=5) == "answered"
        assert len(workers()) == 2
        release.set()
        wait_until(lambda: len(workers()) == 1, what="the abandoned worker ended")
    finally:
        release.set()
        calls.close()
    assert workers() == []


def test_an_idle_worker_ends_by_itself_and_a_later_call_starts_another():
    calls = CallThread(NAME, idle_s=0.1)
    try:
        assert calls.submit(lambda: 1).result(timeout=10) == 1
        wait_until(lambda: workers() == [], what="the idle worker ended")
        assert calls.submit(lambda: 2).result(timeout=10) == 2
    finally:
        calls.close()
    assert workers() == []


def test_a_run_keeps_one_model_thread_for_its_steps_and_ends_it(store, workspace):
    conversation = scripted(
        store,
        workspace,
        [*({"tool_calls": [call("think", {"thought": f"{i}"})]} for i in range(4)), FINISH],
    )
    name = f"treadle-model-{conversation.id[:8]}"
    during: list[tuple[int, ...]] = []
    conversation.callbacks.append(
        lambda stored: (
            during.append(tuple(t.ident or 0 for t in workers(name)))
            if stored.event.kind == "action"
            else None
        )
    )
    try:
        conversation.send_message("go")
        assert conversation.run() is Status.FINISHED
        assert len(during) == 5
        assert len(set(during)) == 1  # the same thread asked the model at every step
        assert len(during[0]) == 1
        assert workers(name) == []  # the run ended it (a server keeps its conversations)
    finally:
        conversation.close()
