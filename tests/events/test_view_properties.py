"""Properties of the transcript over random logs (hypothesis): every call appears exactly once,
results are linked as ``links.pending_actions`` says, every event is shown exactly once, and the
responses are the projection's batches."""

from hypothesis import given

from events.test_projection_properties import interleaved_logs
from treadle.events.links import pending_actions
from treadle.events.model import event_to_dict
from treadle.events.projection import project_messages
from treadle.events.view import CALL_STATES, LogFollower, transcript


def _calls(items):
    return [call for item in items if item["type"] == "response" for call in item["calls"]]


@given(interleaved_logs())
def test_every_call_appears_exactly_once_in_path_order(log):
    calls = _calls(transcript(log.events))
    actions = [event_to_dict(event) for event in log.events if event.kind == "action"]
    assert [call["action"]["event"] for call in calls] == actions
    assert all(call["state"] in CALL_STATES for call in calls)


@given(interleaved_logs())
def test_unanswered_calls_are_exactly_the_pending_actions(log):
    calls = _calls(transcript(log.events))
    unanswered = [
        c["action"]["event"]["id"] for c in calls if c["state"] in ("pending", "interrupted")
    ]
    assert unanswered == [action.id for action in pending_actions(log.events)]
    assert all(c["result"] is None for c in calls if c["state"] in ("pending", "interrupted"))


@given(interleaved_logs())
def test_results_are_linked_as_the_log_follower_links_them(log):
    follower = LogFollower()
    answers = {}
    for event in log.events:
        _parent, answered = follower.feed(event)
        if answered is not None:
            answers[event.id] = answered
    for call in _calls(transcript(log.events)):
        if call["result"] is not None:
            assert answers[call["result"]["event"]["id"]] == call["action"]["event"]["id"]
            state = {"observation": "done", "user_rejection": "rejected", "agent_error": "errored"}
            assert call["state"] == state[call["result"]["event"]["kind"]]
    linked = {
        call["result"]["event"]["id"] for call in _calls(transcript(log.events)) if call["result"]
    }
    assert linked == set(answers)


@given(interleaved_logs())
def test_every_event_is_shown_exactly_once(log):
    shown = []
    for item in transcript(log.events):
        if item["type"] == "response":
            for call in item["calls"]:
                shown.append(call["action"]["event"]["id"])
                if call["result"] is not None:
                    shown.append(call["result"]["event"]["id"])
        else:
            shown.append(item["event"]["id"])
    assert sorted(shown) == sorted(event.id for event in log.events)


@given(interleaved_logs())
def test_responses_are_the_projections_batches(log):
    batches = [
        [call["id"] for call in message["tool_calls"]]
        for message in project_messages(log.events, raw=True)
        if message.get("tool_calls")
    ]
    responses = [
        [call["action"]["event"]["tool_call_id"] for call in item["calls"]]
        for item in transcript(log.events)
        if item["type"] == "response"
    ]
    assert responses == batches


@given(interleaved_logs())
def test_parents_on_a_path_are_the_events_before(log):
    items = transcript(log.events)
    first_ids = [event.id for event in log.events]
    for item in items:
        position = first_ids.index(item["event_id"])
        assert item["parent_id"] == (first_ids[position - 1] if position else None)
