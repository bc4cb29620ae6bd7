"""What the /openhands routes send for an event (``codec.sdk_event_json``, written without the
codec's read-back) is exactly what ``event_to_sdk(sdk_fields_only=True)`` writes: for every
event of the SDK's own fixtures and of a run Treadle made, and an event whose ``extra`` would
change its kind is refused rather than sent as another kind."""

from __future__ import annotations

import pytest

from support.openhands_folders import CONVERSATIONS
from treadle.bench.workload import realistic_events
from treadle.events.frozen_json import freeze
from treadle.events.model import MessageEvent
from treadle.store.openhands.codec import UnwritableEvent, event_to_sdk, sdk_event_json
from treadle.store.openhands.reader import read_conversation_folder


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_the_sent_json_is_the_codecs_for_the_sdks_own_events(name: str) -> None:
    events = read_conversation_folder(CONVERSATIONS[name]).events
    assert events
    for event in events:
        assert sdk_event_json(event) == event_to_sdk(event, sdk_fields_only=True)[0]


def test_the_sent_json_is_the_codecs_for_treadles_own_events() -> None:
    for event in realistic_events(500, seed=3):
        assert sdk_event_json(event) == event_to_sdk(event, sdk_fields_only=True)[0]


def test_an_extra_that_changes_the_kind_is_refused() -> None:
    event = MessageEvent(source="user", text="hi")
    odd = event.model_copy(update={"extra": freeze({"kind": "ActionEvent"})})
    with pytest.raises(UnwritableEvent):
        sdk_event_json(odd)
