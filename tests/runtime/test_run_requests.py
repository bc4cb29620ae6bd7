"""Requests recorded in the log for the run's holder (runtime/requests.py): a pause asked by
another object (another process) stops the run between calls; a message queued while a call runs
is stored after that call's result, before the model is asked again."""

from __future__ import annotations

import threading

from support.waiting import wait_until
from treadle.events.model import (
    ActionEvent,
    AgentErrorEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
)
from treadle.runtime.agent import NOT_STARTED_BY_USER
from treadle.runtime.conversation import Conversation
from treadle.runtime.status import ConversationStatus as Status
from treadle.store.urls import open_store

from .test_conversation import FINISH, call, scripted


def slow_steps(count: int, seconds: float = 0.3) -> list[dict]:
    return [
        {"tool_calls": [call("terminal", {"command": f"sleep {seconds}; echo step {i}"})]}
        for i in range(count)
    ]


def run_in_background(conversation: Conversation) -> tuple[threading.Thread, list[Status]]:
    outcome: list[Status] = []
    thread = threading.Thread(target=lambda: outcome.append(conversation.run()), daemon=True)
    thread.start()
    return thread, outcome


def test_a_pause_requested_by_another_process_stops_the_run_between_calls(store, workspace):
    runner = scripted(store, workspace, [*slow_steps(10), FINISH])
    runner.send_message("work slowly")
    thread, outcome = run_in_background(runner)
    other = Conversation.open(store, runner.id)  # what another server process would hold
    try:
        wait_until(lambda: bool(other.pending_actions()))  # a call is running
        other.request_pause()
        thread.join(timeout=30)
        assert outcome == [Status.PAUSED]
        path = other.active_path()
        assert isinstance(path[-1], PauseEvent)
        assert other.pending_actions() == []
        assert sum(isinstance(event, ObservationEvent) for event in path) < 10
        assert other.stored_status()[0] is Status.PAUSED
    finally:
        other.close()
        runner.close()


def test_a_message_queued_during_a_call_is_stored_after_its_result(store, workspace):
    runner = scripted(store, workspace, [*slow_steps(3, 0.5), FINISH])
    runner.send_message("work slowly")
    thread, outcome = run_in_background(runner)
    other = Conversation.open(store, runner.id)
    try:
        wait_until(lambda: bool(other.pending_actions()))
        in_flight = other.pending_actions()[0]
        queued = other.queue_message("also say hello")
        assert store.head(runner.id) != queued.id  # not stored yet: the call is running
        thread.join(timeout=30)
        assert outcome == [Status.FINISHED]
        path = other.active_path()
        index = next(i for i, event in enumerate(path) if event.id == queued.id)
        message = path[index]
        assert isinstance(message, MessageEvent)
        assert message.text == "also say hello"
        before = path[index - 1]
        assert isinstance(before, ObservationEvent)
        assert before.action_id == in_flight.id
        # Delivered before the model was asked again: the next action comes after it.
        later_actions = [e for e in path[index:] if isinstance(e, ActionEvent)]
        assert later_actions, "the model was asked after the message"
        assert other.deliver_queued_messages() == []  # delivered once
    finally:
        other.close()
        runner.close()


def test_a_pause_request_left_from_an_earlier_run_does_not_stop_a_later_one(store, workspace):
    conversation = scripted(store, workspace, [FINISH])
    conversation.send_message("go")
    conversation.request_pause()  # recorded while nothing ran: meant for no later run
    with conversation:
        assert conversation.run() is Status.FINISHED


def think(thought: str) -> dict:
    return {"tool_calls": [call("think", {"thought": thought})]}


def test_a_pause_recorded_by_another_process_between_steps_stops_the_next_step(store, workspace):
    """The run reads the log's requests once per step, at its safe point: a pause recorded
    as a step ends is honoured before the next model call, even when steps take no time (the
    interrupt watcher, polling every 0.2 s, has not looked yet)."""
    runner = scripted(store, workspace, [think(f"step {i}") for i in range(20)] + [FINISH])
    runner.send_message("think a lot")
    other = Conversation.open(store, runner.id)  # what another server process would hold

    def pause_after_the_first_result(stored) -> None:
        if isinstance(stored.event, ObservationEvent) and not asked:
            asked.append(stored.event.id)
            other.request_pause()

    asked: list[str] = []
    runner.callbacks.append(pause_after_the_first_result)
    try:
        assert runner.run() is Status.PAUSED
        path = runner.active_path()
        assert [e.kind for e in path[-3:]] == ["action", "observation", "pause"]
        assert sum(isinstance(e, ActionEvent) for e in path) == 1  # the model was asked once
        assert runner.stored_status() == (Status.PAUSED, "paused by the user")
    finally:
        other.close()
        runner.close()


def test_a_pause_recorded_by_another_process_during_a_call_stops_the_batchs_next_call(
    store, workspace
):
    """Between the calls of a batch the run reads nothing: the interrupt watcher has read the
    pause request meanwhile (a call longer than its interval), so the next call never starts."""
    batch = {
        "tool_calls": [
            call("terminal", {"command": "sleep 1; echo first"}),
            call("terminal", {"command": "echo second"}),
        ]
    }
    runner = scripted(store, workspace, [batch, FINISH])
    runner.send_message("two commands")
    thread, outcome = run_in_background(runner)
    other = Conversation.open(store, runner.id)
    try:
        wait_until(lambda: len(other.pending_actions()) == 2)  # the first call is running
        other.request_pause()
        thread.join(timeout=30)
        assert outcome == [Status.PAUSED]
        first, second = [e for e in other.active_path() if e.kind in ("observation", "agent_error")]
        assert isinstance(first, ObservationEvent)
        assert "first" in first.content
        assert isinstance(second, AgentErrorEvent)
        assert second.interrupted == "user"
        assert second.error == NOT_STARTED_BY_USER
        assert isinstance(other.active_path()[-1], PauseEvent)
    finally:
        other.close()
        runner.close()


def _request_searches(store) -> tuple[list[tuple[str, int | None]], object]:
    reads: list[tuple[str, int | None]] = []
    search = store.search

    def recording(conversation_id, query):
        if query.text and ("queued_message" in query.text or "pause_request" in query.text):
            reads.append((query.text, query.after_seq))
        return search(conversation_id, query)

    store.search = recording
    return reads, search


def test_a_run_alone_searches_no_requests(store, workspace):
    """Nothing but the run's own events came since the last read: there is no request to
    find, so none is searched for (a step searched twice: ~10 statements, round trips on
    PostgreSQL)."""
    runner = scripted(store, workspace, [think(f"step {i}") for i in range(6)] + [FINISH])
    runner.send_message("think")
    reads, search = _request_searches(store)
    try:
        assert runner.run() is Status.FINISHED
    finally:
        store.search = search
        runner.close()
    assert reads == []


def test_each_step_reads_only_the_requests_recorded_since_the_last_read(store, workspace):
    """Another writer adds to the log at every step: queued messages and pause requests are
    then read from a high-water mark, each read starting at the log's end as the last began,
    never again from the log's start."""
    runner = scripted(store, workspace, [think(f"step {i}") for i in range(6)] + [FINISH])
    runner.send_message("think")
    other = open_store(store.url)  # another process's store

    def another_writer(stored) -> None:
        if isinstance(stored.event, ObservationEvent):
            other.append(runner.id, StateChangeEvent(key="elsewhere", value={}), move_head=False)

    runner.callbacks.append(another_writer)
    reads, search = _request_searches(store)
    try:
        assert runner.run() is Status.FINISHED
    finally:
        store.search = search
        runner.close()
        other.close()
    queued = [after for text, after in reads if "queued_message" in text]
    assert len(queued) == 6  # one read per step after another's write (six think steps)
    assert queued == sorted(set(queued))  # each from a later mark
    paused = [after for text, after in reads if "pause_request" in text]
    assert len(paused) >= 6
    assert paused == sorted(paused)
    assert paused[-1] > paused[0] + 10


def test_a_step_reads_the_conversations_row_once(store, workspace):
    """The log's end (for requests) and the budget's figures come from one read of the row a
    step, where each was a read of its own (a round trip each on PostgreSQL)."""
    runner = scripted(store, workspace, [think(f"step {i}") for i in range(6)] + [FINISH])
    runner.send_message("think")
    reads: list[str] = []
    row, count = store.get_conversation, store.event_count

    def read_row(conversation_id: str):
        reads.append("row")
        return row(conversation_id)

    def read_count(conversation_id: str) -> int:
        reads.append("count")
        return count(conversation_id)

    store.get_conversation, store.event_count = read_row, read_count
    try:
        assert runner.run() is Status.FINISHED
    finally:
        store.get_conversation, store.event_count = row, count
        runner.close()
    steps = 7  # six think steps and the finish
    assert reads.count("row") + reads.count("count") <= steps + 3  # the run's start and end
    assert reads.count("row") >= steps  # the budget saw each step's row
