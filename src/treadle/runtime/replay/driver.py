"""Drives a replayed conversation through the recorded inputs: user messages sent, pauses
made, budgets raised, the recorded steps run, and each call that waits for confirmation
confirmed or rejected as the recorded user did. The run loop is the runtime's own.
"""

from __future__ import annotations

from itertools import groupby

from treadle.events.model import ActionEvent, PauseEvent, UserRejectionEvent
from treadle.runtime.budget import Budget
from treadle.runtime.conversation import Conversation
from treadle.runtime.errors import NotWaiting
from treadle.runtime.replay.recorded_model import RecordedModel
from treadle.runtime.replay.recorded_tools import ReplayedCrash
from treadle.runtime.replay.recording import Recording


def drive(conversation: Conversation, recording: Recording, model: RecordedModel) -> None:
    """Feed ``recording``'s inputs to ``conversation`` in order: a user message lands exactly
    where it was recorded, and the steps between two inputs run as the runtime runs them (one
    run, again after each stop of its own: a confirmation, a crash). Each call waiting for
    confirmation is confirmed or rejected at its recorded place: before the first input that
    stands after its answer on the path."""
    if recording.path and recording.path[0].kind == "system_prompt":
        conversation.start()  # stored even when no input follows it (a head moved back to it)
    inputs = recording.inputs
    index = 0
    while index < len(inputs):
        item = inputs[index]
        answer_confirmations(conversation, recording, until=item.at)
        if item.kind == "step":
            steps = next(
                (n for n, later in enumerate(inputs[index:]) if later.kind != "step"),
                len(inputs) - index,
            )
            index += steps
            until = inputs[index].at if index < len(inputs) else len(recording.path)
            run_steps(conversation, recording, model, steps, until)
            continue
        if item.kind == "send":
            conversation.send_message(item.text)
        elif item.kind == "pause":
            conversation.pause()
        elif item.kind == "raise_budget":
            conversation.raise_budget(Budget(**item.budgets))
        elif item.kind == "hold":
            hold_in_last_batch(conversation, item.count)
        index += 1
    answer_confirmations(conversation, recording, until=len(recording.path))


def hold_in_last_batch(conversation: Conversation, count: int) -> None:
    """Move the head back to the ``count``-th event of the last batch on the path (its
    actions, then their answers), as the recorded user did: the calls answered after it are
    open again, waiting."""
    path = conversation.active_path()
    actions = [i for i, event in enumerate(path) if isinstance(event, ActionEvent)]
    if not actions:
        return
    last = path[actions[-1]]
    assert isinstance(last, ActionEvent)
    start = actions[-1]
    while start > 0:
        before = path[start - 1]
        if not isinstance(before, ActionEvent) or before.llm_response_id != last.llm_response_id:
            break
        start -= 1
    target = path[min(start + count, len(path)) - 1]
    if target.id != conversation.head:
        conversation.switch_branch(target.id)


def run_steps(
    conversation: Conversation, recording: Recording, model: RecordedModel, steps: int, until: int
) -> None:
    """Run ``steps`` recorded steps: ``run(max_steps=steps left)`` until they are made. A
    run ends early where the runtime stops (a confirmation asked, an error, a pause, an
    interrupt, a crash replayed): the recorded decisions whose answers stand before ``until``
    (the next input's place) are given, and a new run goes on. ``model`` counts the steps
    that asked it; a step that paused on the budget asks nothing."""
    left = steps
    while left > 0:
        asked, head = model.steps_asked, conversation.head
        try:
            conversation.run(max_steps=left)
            crashed = False
        except ReplayedCrash:  # the recorded run died here: the next run closes its call
            crashed = True
        made = model.steps_asked - asked + _paused_on_budget(conversation, head)
        left -= max(1, made)  # at least one: a replay that goes wrong still ends
        if not crashed:
            answer_confirmations(conversation, recording, until)


def _paused_on_budget(conversation: Conversation, head_before: str | None) -> int:
    """1 when the run just ended with a pause on its budget (a step of its own), else 0."""
    last = conversation.active_path(limit=1)
    paused = bool(last) and isinstance(last[0], PauseEvent) and last[0].source == "environment"
    return int(paused and last[0].id != head_before)


def answer_confirmations(conversation: Conversation, recording: Recording, until: int) -> None:
    """Confirm or reject the calls waiting for confirmation as the recording did, in the
    order their results were recorded, those whose result stands before ``until`` on the
    path; a call the recording never answered stays pending. When the recorded run died in
    a confirmed call (``ReplayedCrash``), the status stays running, the call open, as the
    kill left them: the next run closes it."""
    while True:
        pending = [
            action
            for action in conversation.pending_actions()
            if recording.result_position(action.tool_call_id) < until
        ]
        if not pending:
            return
        pending.sort(key=lambda action: recording.result_position(action.tool_call_id))
        first_decision = next(groupby(pending, key=lambda a: _decision(recording, a)))
        (kind, reason), group = first_decision
        ids = [action.id for action in group]
        try:
            if kind == "reject":
                conversation.reject(ids, reason=reason)
            else:
                conversation.confirm(ids)
        except NotWaiting:  # a run (the one a crash left running) is to answer them
            return
        except ReplayedCrash:
            return


def _decision(recording: Recording, action: ActionEvent) -> tuple[str, str]:
    result = recording.results[action.tool_call_id]
    if isinstance(result, UserRejectionEvent):
        return "reject", result.reason
    return "confirm", ""
