"""Skills in a run: AGENTS.md reaches the first request through the real LiteLLM path, a trigger
word adds its skill once per branch, and the log alone (no workspace files) reproduces what the
model was sent, after a reopen and through an OpenHands export and import."""

from __future__ import annotations

import json
from pathlib import Path

from support.fake_openai import FakeOpenAIServer
from treadle.events.model import MessageEvent, StateChangeEvent, SystemPromptEvent
from treadle.events.projection import project_messages
from treadle.runtime.conversation import Conversation
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.skills import SKILLS_KEY
from treadle.runtime.status import ConversationStatus as Status
from treadle.store.openhands import export_conversation, import_conversation
from treadle.store.urls import open_store

AGENTS_TEXT = "Always run the tests with make check."
SKILL_TEXT = "Use slim base images and pin their digests."


def skilled_workspace(workspace: Path) -> Path:
    (workspace / "AGENTS.md").write_text(f"# Rules\n\n{AGENTS_TEXT}\n")
    skills = workspace / ".openhands" / "skills"
    skills.mkdir(parents=True)
    (skills / "docker.md").write_text(
        f"---\nname: docker\ntriggers: [docker, container]\n---\n{SKILL_TEXT}\n"
    )
    (skills / "broken.md").write_text("---\ntriggers: [oops\n---\nnever loaded\n")
    return workspace


def text_of(messages) -> str:
    return json.dumps(messages)


def user_messages(path) -> list[MessageEvent]:
    return [e for e in path if isinstance(e, MessageEvent) and e.role == "user"]


def test_agents_md_and_a_triggered_skill_reach_the_model_once(store, workspace):
    skilled_workspace(workspace)
    replies = [{"text": "one"}, {"text": "two"}, {"text": "three"}]
    with FakeOpenAIServer(replies) as server:
        settings = ConversationSettings.litellm("openai/test-model", workspace, server.base_url)
        with Conversation.create(store, settings) as conv:
            for text in ("Build the Docker image", "and the CONTAINER too", "docker again"):
                conv.send_message(text)
                assert conv.run() is Status.FINISHED
            path = conv.active_path()
            conversation_id = conv.id
    first = server.requests[0]["body"]["messages"]
    assert first[0]["role"] == "system"
    assert AGENTS_TEXT in first[0]["content"]
    assert SKILL_TEXT not in first[0]["content"]
    assert first[-1]["role"] == "user"
    assert first[-1]["content"].startswith('Build the Docker image\n<skill name="docker"')
    assert SKILL_TEXT in first[-1]["content"]
    last = server.requests[-1]["body"]["messages"]
    assert text_of(last).count(SKILL_TEXT) == 1  # added once, kept in the context, not again
    assert [m.activated_skills for m in user_messages(path)] == [("docker",), (), ()]
    system = path[0]
    assert isinstance(system, SystemPromptEvent)
    assert system.skills == ("agents",)
    assert AGENTS_TEXT in (system.context or "")
    (fact,) = [
        item.event
        for item in store.get_range(conversation_id, 0, 1000)
        if isinstance(item.event, StateChangeEvent) and item.event.key == SKILLS_KEY
    ]
    assert [s["name"] for s in fact.value["loaded"]] == ["agents", "docker"]
    (broken,) = fact.value["skipped"]
    assert broken["source"] == ".openhands/skills/broken.md"
    assert broken["error"].startswith("line 3: bad YAML")


def test_a_skill_is_added_again_on_another_branch(store, workspace):
    skilled_workspace(workspace)
    settings = ConversationSettings.scripted_inline([{"text": "ok"}] * 3, workspace)
    with Conversation.create(store, settings) as conv:
        first = conv.send_message("a docker question")
        conv.run()
        conv.send_message("docker, once more")
        conv.switch_branch(first.parent_id)  # the system prompt: before the skill was added
        again = conv.send_message("docker on a new branch")
        path = conv.active_path()
    assert [m.text for m in user_messages(path)] == ["docker on a new branch"]
    stored = next(e for e in path if e.id == again.id)
    assert stored.activated_skills == ("docker",)
    assert SKILL_TEXT in stored.extended_content[0]


def test_a_queued_message_gets_its_skill_when_it_is_stored(store, workspace):
    skilled_workspace(workspace)
    settings = ConversationSettings.scripted_inline([{"text": "ok"}] * 2, workspace)
    with Conversation.create(store, settings) as conv:
        conv.send_message("hello")
        queued = conv.queue_message("a container question")
        conv.run()
        stored = next(e for e in conv.active_path() if e.id == queued.id)
    assert stored.activated_skills == ("docker",)


def test_the_log_alone_reproduces_the_context_after_the_files_are_gone(
    store, store_file, workspace, tmp_path
):
    skilled_workspace(workspace)
    settings = ConversationSettings.scripted_inline([{"text": "ok"}], workspace)
    with Conversation.create(store, settings) as conv:
        conv.send_message("docker please")
        conv.run()
        sent = conv.messages()
        conversation_id = conv.id
    (workspace / "AGENTS.md").unlink()
    (workspace / ".openhands/skills/docker.md").unlink()
    with Conversation.open(store, conversation_id) as reopened:
        assert reopened.messages() == sent
        reopened.send_message("docker, after the file is gone")  # no skill to add any more
        assert user_messages(reopened.active_path())[-1].activated_skills == ()

    export_conversation(store, conversation_id, tmp_path / "sdk")
    events = [json.loads(p.read_text()) for p in sorted((tmp_path / "sdk" / "events").iterdir())]
    system = next(e for e in events if e["kind"] == "SystemPromptEvent")
    assert AGENTS_TEXT in system["dynamic_context"]["text"]
    message = next(e for e in events if e["kind"] == "MessageEvent")
    assert message["activated_skills"] == ["docker"]
    (added,) = message["extended_content"]
    assert added["type"] == "text"
    assert SKILL_TEXT in added["text"]

    other = open_store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        result = import_conversation(other, tmp_path / "sdk")
        assert result.imported, result.problems
        path = other.path_to_root(result.conversation_id, other.head(result.conversation_id))
        assert project_messages(path)[:3] == sent
        imported = user_messages(path)[0]
        assert imported.activated_skills == ("docker",)
    finally:
        other.close()
