"""For conversations the real OpenHands SDK made, Treadle's head and projection equal what the
SDK takes as head and sends its model (tests/fixtures/openhands, see its README)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from support.openhands_folders import CONVERSATIONS, read_json
from support.openhands_folders import normalised as norm
from treadle.cli import app
from treadle.events.projection import count_tool_calls, project_messages
from treadle.events.tree import EventTree
from treadle.store.openhands import read_conversation_folder

NAMES = sorted(CONVERSATIONS)


@pytest.mark.parametrize("name", NAMES)
def test_head_is_the_one_the_sdk_resumes_from(name):
    folder = CONVERSATIONS[name]
    conversation = read_conversation_folder(folder)
    assert conversation.problems == []
    assert conversation.head == read_json(folder / "expected_messages.json")["head"]


@pytest.mark.parametrize("name", NAMES)
def test_projection_equals_what_the_sdk_sends_now(name):
    folder = CONVERSATIONS[name]
    conversation = read_conversation_folder(folder)
    path = (
        EventTree(conversation.events).path_to_root(conversation.head) if conversation.head else []
    )
    expected = read_json(folder / "expected_messages.json")["messages"]
    assert norm(project_messages(path)) == norm(expected)


@pytest.mark.parametrize("name", NAMES)
def test_projection_equals_every_model_call_the_sdk_made(name):
    """At each call, the SDK's head then: the projection of that path is what it sent."""
    folder = CONVERSATIONS[name]
    tree = EventTree(read_conversation_folder(folder).events)
    for number, call in enumerate(read_json(folder / "model_calls.json")):
        path = tree.path_to_root(call["head"])
        messages = project_messages(path)
        assert norm(messages) == norm(call["messages"]), f"call {number}"
        actions = sum(1 for event in path if event.kind == "action")
        assert count_tool_calls(messages) <= actions  # unanswered calls are not sent


def test_the_fixtures_cover_the_scenarios_of_the_issue():
    """Parallel calls, agent errors, file edits, turns, fork/navigate, rejection + pending,
    condensation, a killed run: each shows in the events the SDK wrote."""
    kinds = {
        name: {event.kind for event in read_conversation_folder(folder).events}
        for name, folder in CONVERSATIONS.items()
    }
    assert "agent_error" in kinds["agent_errors"]
    assert {"user_rejection", "pause"} <= kinds["confirmation"]
    assert "condensation" in kinds["condensation"]
    assert "state_change" in kinds["file_edits"]
    parallel = read_conversation_folder(CONVERSATIONS["parallel_calls"]).events
    responses = [event.llm_response_id for event in parallel if event.kind == "action"]
    assert len(responses) == 3
    assert len(set(responses)) == 1
    source = read_conversation_folder(CONVERSATIONS["fork_source"])
    assert EventTree(source.events).branch_points()
    assert source.head != source.events[-1].id  # navigated back to the first branch


def test_cli_project_and_path_take_the_folder_and_its_head():
    folder = CONVERSATIONS["fork_source"]
    expected = read_json(folder / "expected_messages.json")
    runner = CliRunner()
    projected = runner.invoke(app, ["project", str(folder)])
    assert projected.exit_code == 0, projected.stderr
    assert norm(json.loads(projected.stdout)) == norm(expected["messages"])
    path = runner.invoke(app, ["path", str(folder)])
    assert json.loads(path.stdout)[-1]["id"] == expected["head"]
    # --head still chooses another branch of the folder
    last = read_conversation_folder(folder).events[-1].id
    other = runner.invoke(app, ["path", str(folder), "--head", last])
    assert json.loads(other.stdout)[-1]["id"] == last


def test_cli_project_of_an_empty_head_is_empty():
    result = CliRunner().invoke(app, ["project", str(CONVERSATIONS["empty_head"])])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_sdk_conversations_audit_clean_with_the_condense_checks(name):
    """The SDK's own condensations (fixture ``condensation``) keep CONDENSE-SPLIT,
    CONDENSE-PENDING and CONDENSE-LOOP."""
    from treadle.events.audit import audit_events

    events = read_conversation_folder(CONVERSATIONS[name]).events
    report = audit_events(events)
    assert not [v for v in report.violations if v.contract.startswith("CONDENSE")], report
