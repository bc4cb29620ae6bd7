"""Drives a replayed conversation through the recorded inputs: user messages sent, pauses
made, one model step per recorded response, and each call that waits for confirmation
confirmed or rejected as the recorded user did. The run loop is the runtime's own.
"""

from __future__ import annotations

from itertools import groupby

from treadle.events.model import ActionEvent, UserRejectionEvent
from treadle.runtime.budget import Budget
from treadle.runtime.conversation import Conversation
from treadle.runtime.replay.recorded_model import RecordedModel, replay_condenser
from treadle.runtime.replay.recorded_tools import ReplayedCrash
from treadle.runtime.replay.recording import Recording
from treadle.runtime.status import ConversationStatus


def prepare(conversation: Conversation, recording: Recording, model: RecordedModel) -> None:
    """Before the first step: the recorded run's condenser, asking ``model`` for summaries
    (the one the settings build would not know a LiteLLM model's window)."""
    condenser = replay_condenser(recording, model)
    if condenser is not None:
        condenser.mask = conversation.secrets.mask
    conversation.condenser = condenser


def drive(conversation: Conversation, recording: Recording) -> None:
    """Feed ``recording``'s inputs to ``conversation`` in order (each step is one model call:
    ``run(max_steps=1)``, so a user message lands exactly where it was recorded)."""
    for item in recording.inputs:
        if item.kind == "send":
            conversation.send_message(item.text)
        elif item.kind == "pause":
            conversation.pause()
        elif item.kind == "raise_budget":
            conversation.raise_budget(Budget(**item.budgets))
        else:
            try:
                conversation.run(max_steps=1)
            except ReplayedCrash:  # the recorded run died here: the next run closes its call
                continue
            answer_confirmations(conversation, recording)


def answer_confirmations(conversation: Conversation, recording: Recording) -> None:
    """Confirm or reject the calls waiting for confirmation as the recording did, in the
    order their results were recorded; a call the recording never answered stays pending."""
    while conversation.status is ConversationStatus.WAITING_FOR_CONFIRMATION:
        pending = [
            action
            for action in conversation.pending_actions()
            if action.tool_call_id in recording.results
        ]
        if not pending:
            return
        pending.sort(key=lambda action: recording.result_position(action.tool_call_id))
        first_decision = next(groupby(pending, key=lambda a: _decision(recording, a)))
        (kind, reason), group = first_decision
        ids = [action.id for action in group]
        if kind == "reject":
            conversation.reject(ids, reason=reason)
        else:
            conversation.confirm(ids)


def _decision(recording: Recording, action: ActionEvent) -> tuple[str, str]:
    result = recording.results[action.tool_call_id]
    if isinstance(result, UserRejectionEvent):
        return "reject", result.reason
    return "confirm", ""
