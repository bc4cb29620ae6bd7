"""The model of a replay: it answers the n-th model call on the path with the n-th recorded
response, and a condenser's summary call with the recorded summary (never asked again).

It finds its place like the scripted model (``ModelRequest.place``): the runtime tells it how
many responses its path already holds. Where the recording condensed after a provider refused the
request as too long, it refuses once at the same place, so the runtime condenses there too;
where a model call failed (a ``model_error`` fact), it fails there again, with that error.
"""

from __future__ import annotations

import threading

from treadle.data.settings import CondenseMode
from treadle.runtime.condense.condenser import Condenser
from treadle.runtime.llm.base import (
    ContextWindowExceeded,
    ModelError,
    ModelRequest,
    ModelResponse,
)
from treadle.runtime.llm.litellm_model import litellm_context_window, litellm_token_counter
from treadle.runtime.replay.recording import Recording
from treadle.runtime.settings import build_condenser

END_OF_RECORDING = "the recording has no response {number}: the replay stops here"


class RecordedModel:
    """Answers from ``recording``; named as the recorded model (its name picks the token
    counter the condenser uses, so the replay condenses where the run did)."""

    def __init__(self, recording: Recording, name: str) -> None:
        self._recording = recording
        self._name = name
        self._refused: set[int] = set()
        self._failed: dict[int, int] = {}
        self.steps_asked = 0
        """Model calls of a step made so far (a refusal replayed is not one: the step asks
        again once condensed)."""
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            return self._summary(request.summaries_before)
        number = request.place
        with self._lock:
            if number in self._recording.refused_before and number not in self._refused:
                self._refused.add(number)
                stated = self._recording.refusal_limits.get(number)
                said = f": its maximum context length is {stated} tokens" if stated else ""
                raise ContextWindowExceeded(
                    "the recorded provider refused this request as longer than its context "
                    f"window (replayed){said}"
                )
            self.steps_asked += 1
            failures = self._recording.failed_before.get(number, [])
            failed = self._failed.get(number, 0)
            if failed < len(failures):
                self._failed[number] = failed + 1
                failure = failures[failed]
                raise ModelError(failure["error"], raw=failure["raw_response"])
        responses = self._recording.responses
        if number >= len(responses):
            raise ModelError(END_OF_RECORDING.format(number=number + 1))
        return responses[number]

    def _summary(self, number: int) -> ModelResponse:
        """The ``number``-th recorded condensation's summary, as it was recorded (its
        response id and usage); a condensation recorded without one fails again."""
        summaries = self._recording.summaries
        if number >= len(summaries):
            raise ModelError(f"the recording has no summary {number + 1}")
        recorded = summaries[number]
        if recorded.summary is None:
            raise ModelError(f"the recorded summary call failed: {recorded.note}")
        return ModelResponse(
            id=recorded.llm_response_id or "",
            text=recorded.summary,
            usage=recorded.usage or ModelResponse("").usage,
        )


def recorded_model_name(recording: Recording) -> str:
    """The name the recorded model had: LiteLLM's is the settings' model; a scripted one's is
    in the usage its responses recorded (``scripted:<source>``)."""
    choice = recording.settings.model
    if choice.kind == "litellm" and choice.model:
        return choice.model
    for response in recording.responses:
        if response.usage.model:
            return response.usage.model
    return f"scripted:{choice.script}" if choice.script else "scripted:inline"


def replay_condenser(recording: Recording, model: RecordedModel) -> Condenser | None:
    """The condenser the recorded run had (its budget, its token counter, for a LiteLLM model
    the input window LiteLLM knows for it), its summary calls answered by ``model``: the
    provider itself is never called."""
    settings = recording.settings
    if settings.condense is CondenseMode.OFF:
        return None
    if settings.model.kind != "litellm":
        return build_condenser(settings, model)
    return Condenser(
        model,
        litellm_token_counter(model.name),
        context_tokens=settings.context_tokens,
        window=lambda: litellm_context_window(model.name),
    )
