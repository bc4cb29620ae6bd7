"""Nothing is lost either way: SDK folder -> store -> folder gives the SDK's files back (equal as
JSON, and byte for byte); Treadle events -> folder -> events gives the same events."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from support.openhands_folders import (
    CONVERSATIONS,
    copy_conversation,
    event_files,
    read_json,
    sdk_files,
    write_json,
)
from treadle.events.model import (
    ROOT,
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    ForeignEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateChangeEvent,
    SystemPromptEvent,
    TokenUsage,
    UserRejectionEvent,
    event_to_dict,
)
from treadle.store.openhands import (
    event_from_sdk,
    event_to_sdk,
    export_conversation,
    import_conversation,
    read_conversation_folder,
    write_conversation_folder,
)
from treadle.store.openhands.codec import same_json
from treadle.store.urls import open_store

NAMES = sorted(CONVERSATIONS)


@pytest.fixture
def store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield opened
    opened.close()


def dumps(events):
    return [event_to_dict(event) for event in events]


@pytest.mark.parametrize("name", NAMES)
def test_import_then_export_gives_the_sdk_files_back(name, store, tmp_path):
    folder = CONVERSATIONS[name]
    result = import_conversation(store, folder)
    assert result.imported, result.problems
    written = export_conversation(store, result.conversation_id, tmp_path / "out")
    assert sdk_files(written.folder) == sdk_files(folder)
    for relative in sdk_files(folder):
        assert same_json(read_json(written.folder / relative), read_json(folder / relative))
        # Keys in the SDK's order, compact as the SDK writes: the very same bytes.
        assert (written.folder / relative).read_bytes() == (folder / relative).read_bytes()
    assert written.side_entries == 0


@pytest.mark.parametrize("name", NAMES)
def test_export_then_import_gives_the_same_events_and_head(name, store, tmp_path):
    result = import_conversation(store, CONVERSATIONS[name])
    stored = [s.event for s in store.get_range(result.conversation_id, 0, 10_000)]
    export_conversation(store, result.conversation_id, tmp_path / "out")
    again = read_conversation_folder(tmp_path / "out")
    assert dumps(again.events) == dumps(stored)
    assert again.head == store.head(result.conversation_id) == result.head


@pytest.mark.parametrize("name", NAMES)
def test_every_sdk_event_maps_and_writes_back_alone(name):
    """The codec by itself, file by file: ids and timestamps verbatim (naive ones too)."""
    for file in event_files(CONVERSATIONS[name]):
        data = read_json(file)
        event = event_from_sdk(data).event
        assert (event.id, event.timestamp, event.parent_id) == (
            data["id"],
            data["timestamp"],
            data.get("parent_id"),
        )
        written, side = event_to_sdk(event)
        assert side is None
        assert same_json(written, data)


def test_sdk_kinds_map_onto_treadle_kinds():
    kinds = {}
    for folder in CONVERSATIONS.values():
        for file in event_files(folder):
            data = read_json(file)
            kinds[data["kind"]] = event_from_sdk(data).event.kind
    assert kinds == {
        "SystemPromptEvent": "system_prompt",
        "MessageEvent": "message",
        "ActionEvent": "action",
        "ObservationEvent": "observation",
        "AgentErrorEvent": "agent_error",
        "UserRejectObservation": "user_rejection",
        "Condensation": "condensation",
        "PauseEvent": "pause",
        "ConversationStateUpdateEvent": "state_change",
    }


def test_unmodelled_fields_and_unknown_kinds_are_kept():
    action = next(
        read_json(f)
        for f in event_files(CONVERSATIONS["parallel_calls"])
        if read_json(f)["kind"] == "ActionEvent"
    )
    action["a_future_field"] = {"nested": [1, 2.5, True, None]}
    event = event_from_sdk(action).event
    assert event.extra["a_future_field"] == {"nested": (1, 2.5, True, None)}
    assert event.extra["action"]["kind"] == "TerminalAction"  # the SDK's typed action
    assert same_json(event_to_sdk(event)[0], action)

    token = {
        "id": str(uuid.uuid4()),
        "timestamp": "2026-01-01T00:00:00",
        "source": "agent",
        "prompt_token_ids": [1, 2],
        "response_token_ids": [3],
        "kind": "TokenEvent",
    }
    foreign = event_from_sdk(token).event
    assert foreign.kind == "foreign"
    assert foreign.foreign_kind == "TokenEvent"
    assert same_json(event_to_sdk(foreign)[0], token)


def test_a_field_set_to_its_default_is_told_from_an_absent_one():
    """``false`` is not ``0``, and a field the SDK did not write is not written back."""
    message = read_json(event_files(CONVERSATIONS["new_root"])[1])
    del message["activated_skills"]
    message["llm_message"]["content"][0]["cache_prompt"] = 0
    assert same_json(event_to_sdk(event_from_sdk(message).event)[0], message)


def treadle_events() -> list:
    """One native event of every kind, with fields the SDK format has no place for."""
    system = SystemPromptEvent(
        text="system",
        tools=({"type": "function", "function": {"name": "t"}},),
        context="the workspace's AGENTS.md",
        skills=("agents",),
    )
    user = MessageEvent(
        source="user",
        text="look\nhere",
        image_urls=("https://x/a.png",),
        activated_skills=("docker",),
        extended_content=('<skill name="docker">use slim images</skill>',),
        parent_id=system.id,
    )
    first = ActionEvent(
        llm_response_id="r1",
        tool_call_id="c1",
        tool_name="terminal",
        arguments={"command": "ls"},
        raw_arguments='{"command": "ls"}',
        thought="go",
        reasoning="why",
        security_risk="low",
        usage=TokenUsage(model="m", prompt_tokens=3, completion_tokens=1, cost_usd=0.5),
        parent_id=user.id,
    )
    second = ActionEvent(
        llm_response_id="r1",
        tool_call_id="c2",
        tool_name="nope",
        raw_arguments='{"x": ',
        parent_id=first.id,
    )
    result = ObservationEvent(
        action_id=first.id,
        tool_call_id="c1",
        tool_name="terminal",
        content="failed",
        is_error=True,
        data={"exit_code": 2},
        parent_id=second.id,
    )
    error = AgentErrorEvent(
        tool_call_id="c2",
        tool_name="nope",
        action_id=second.id,
        error="unknown tool",
        parent_id=result.id,
    )
    pause = PauseEvent(parent_id=error.id)
    state = StateChangeEvent(key="status", value={"to": ["paused"]}, parent_id=pause.id)
    condensation = CondensationEvent(
        forgotten_event_ids=(user.id,), summary="s", summary_offset=1, parent_id=pause.id
    )
    rejection = UserRejectionEvent(
        action_id=first.id,
        tool_call_id="c1",
        tool_name="terminal",
        reason="no",
        rejected_by="hook",
        parent_id=condensation.id,
    )
    foreign = ForeignEvent(
        source="agent",
        foreign_kind="TokenEvent",
        payload={"prompt_token_ids": [1], "response_token_ids": [2]},
        parent_id=rejection.id,
    )
    answer = MessageEvent(
        source="agent",
        text="",
        reasoning="thinking",
        llm_response_id="r2",
        parent_id=foreign.id,
        extra={"from_elsewhere": "kept"},
    )
    legacy = MessageEvent(source="user", text="no parent: the one before")
    root = MessageEvent(source="user", text="a new root", parent_id=ROOT)
    return [system, user, first, second, result, error, pause, state, condensation, rejection,
            foreign, answer, legacy, root]  # fmt: skip


@pytest.mark.parametrize(
    "conversation_id", [str(uuid.uuid4()), "not-a-uuid"], ids=["uuid", "not-a-uuid"]
)
def test_treadle_events_round_trip_through_a_folder(tmp_path, conversation_id):
    events = treadle_events()
    head = events[-4].id  # a head with later events on its branch and beside it
    written = write_conversation_folder(
        tmp_path / "out", events, head=head, conversation_id=conversation_id
    )
    assert written.side_entries > 0
    again = read_conversation_folder(tmp_path / "out")
    assert again.problems == []
    assert dumps(again.events) == dumps(events)
    assert again.head == head
    assert again.conversation_id == conversation_id
    state = read_json(tmp_path / "out" / "base_state.json")
    assert uuid.UUID(state["id"])  # the SDK's ConversationID is a UUID
    assert state["leaf_event_id"] == head


def test_store_round_trip_of_treadle_events(store, tmp_path):
    events = treadle_events()
    info = store.create_conversation()
    store.append_batch(info.id, events)
    store.set_head(info.id, events[11].id)
    export_conversation(store, info.id, tmp_path / "out")
    result = import_conversation(store, tmp_path / "out", replace=True)
    assert result.imported
    assert result.replaced
    stored = [s.event for s in store.get_range(info.id, 0, 100)]
    assert dumps(stored) == dumps(events)
    assert store.head(info.id) == events[11].id


def test_a_moved_head_is_saved_and_an_unmoved_null_head_stays_null(store, tmp_path):
    folder = copy_conversation("new_root", tmp_path / "legacy")
    state = read_json(folder / "base_state.json")
    del state["leaf_event_id"]  # pre-tree state: the head is the last event
    write_json(folder / "base_state.json", state)
    result = import_conversation(store, folder)
    events = [s.event for s in store.get_range(result.conversation_id, 0, 100)]
    assert store.head(result.conversation_id) == events[-1].id
    export_conversation(store, result.conversation_id, tmp_path / "same")
    assert "leaf_event_id" not in read_json(tmp_path / "same" / "base_state.json")
    store.set_head(result.conversation_id, events[1].id)
    export_conversation(store, result.conversation_id, tmp_path / "moved")
    assert read_json(tmp_path / "moved" / "base_state.json")["leaf_event_id"] == events[1].id


def test_a_linear_legacy_log_keeps_its_parent_rule(store, tmp_path):
    """Events without parent_id (older SDKs): each continues the one before it."""
    folder = copy_conversation("parallel_calls", tmp_path / "linear")
    for file in event_files(folder):
        data = read_json(file)
        data.pop("parent_id", None)
        write_json(file, data)
    state = read_json(folder / "base_state.json")
    for key in ("leaf_event_id", "head_is_empty"):
        del state[key]
    write_json(folder / "base_state.json", state)
    conversation = read_conversation_folder(folder)
    assert conversation.schema == "linear"
    assert all(event.parent_id is None for event in conversation.events)
    assert conversation.head == conversation.events[-1].id
    result = import_conversation(store, folder)
    path = store.path_to_root(result.conversation_id)
    assert [e.id for e in path] == [e.id for e in conversation.events]
    export_conversation(store, result.conversation_id, tmp_path / "out")
    for relative in sdk_files(folder):
        assert same_json(read_json(tmp_path / "out" / relative), read_json(folder / relative))


def test_a_null_head_skips_trailing_state_updates_and_conversation_errors(tmp_path):
    folder = copy_conversation("new_root", tmp_path / "c")
    state = read_json(folder / "base_state.json")
    del state["leaf_event_id"]
    write_json(folder / "base_state.json", state)
    last = read_conversation_folder(folder).events[-1].id
    count = len(event_files(folder))
    for offset, kind, fields in [
        (0, "ConversationErrorEvent", {"code": "E", "detail": "d"}),
        (1, "ConversationStateUpdateEvent", {"key": "execution_status", "value": "error"}),
    ]:
        event_id = str(uuid.uuid4())
        event = {"id": event_id, "timestamp": "2026-01-01T00:00:00", "source": "environment",
                 "parent_id": last, **fields, "kind": kind}  # fmt: skip
        write_json(folder / "events" / f"event-{count + offset:05d}-{event_id}.json", event)
    conversation = read_conversation_folder(folder)
    assert conversation.head == last
    assert conversation.events[-2].kind == "foreign"  # ConversationErrorEvent


def test_the_lagging_head_of_the_killed_run_is_reported_and_kept(store):
    result = import_conversation(store, CONVERSATIONS["killed_mid_tool"])
    assert result.imported
    lag = [notice for notice in result.notices if notice.code == "TREE-HEAD"]
    assert len(lag) == 1
    assert any(name.startswith("events/event-00004-") for name in lag[0].files)
    assert (
        store.head(result.conversation_id)
        == result.head
        != read_conversation_folder(CONVERSATIONS["killed_mid_tool"]).events[-1].id
    )


def test_origin_metadata(store):
    result = import_conversation(store, CONVERSATIONS["confirmation"])
    origin = store.get_conversation(result.conversation_id).metadata["origin"]
    assert origin == {
        "format": "openhands",
        "sdk_version": None,
        "layout_version": "1.58.2",
        "schema": "tree",
        "path": str(Path(CONVERSATIONS["confirmation"]).resolve()),
    }


def test_a_field_of_a_newer_sdk_survives_import_and_export(store, tmp_path):
    folder = copy_conversation("parallel_calls", tmp_path / "newer")
    file = event_files(folder)[2]
    data = read_json(file)
    data["critic_result"] = {"score": 0.5, "message": "from a newer SDK"}
    data["field_from_the_future"] = [1, {"a": None}]
    write_json(file, data)
    result = import_conversation(store, folder)
    export_conversation(store, result.conversation_id, tmp_path / "out")
    assert same_json(read_json(tmp_path / "out" / file.relative_to(folder)), data)


def test_extra_fields_from_elsewhere_stay_out_of_sdk_files(tmp_path):
    """Without an SDK base state the events came from elsewhere: the SDK refuses unknown
    fields, so those wait in the side table (and still come back on import)."""
    events = treadle_events()
    write_conversation_folder(tmp_path / "out", events, head=None, conversation_id="c")
    answer = read_json(next((tmp_path / "out" / "events").glob(f"*-{events[11].id}.json")))
    assert "from_elsewhere" not in answer
    again = read_conversation_folder(tmp_path / "out")
    assert again.events[11].extra == {"from_elsewhere": "kept"}


def test_the_installed_command_imports_and_exports(tmp_path):
    """Once through the real entry point, as a user runs it."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    folder = CONVERSATIONS["agent_errors"]
    run = [sys.executable, "-m", "treadle"]
    imported = subprocess.run(
        [*run, "import", "openhands", str(folder), "--store", url],
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
    exported = subprocess.run(
        [*run, "export", "openhands", imported.stdout.strip(), str(tmp_path / "o"), "--store", url],
        capture_output=True,
        text=True,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    assert sdk_files(tmp_path / "o") == sdk_files(folder)


@pytest.mark.postgres
def test_import_then_export_on_postgresql(tmp_path):
    """The same round trip through the PostgreSQL store (the server of tests/store)."""

    import psycopg

    from support.postgres import POSTGRES_BASE_URL as base

    schema = f"treadle_openhands_{uuid.uuid4().hex[:10]}"
    opened = open_store(f"{base}?schema={schema}")
    try:
        for name, folder in CONVERSATIONS.items():
            result = import_conversation(opened, folder)
            assert result.imported, result.problems
            written = export_conversation(opened, result.conversation_id, tmp_path / name)
            for relative in sdk_files(folder):
                assert (written.folder / relative).read_bytes() == (folder / relative).read_bytes()
    finally:
        opened.close()
        with psycopg.connect(base, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
