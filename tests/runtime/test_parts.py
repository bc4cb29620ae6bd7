"""A conversation's parts (runtime/parts.py): built from settings by one builder, given to a
conversation or built by it, and closed by whoever built them."""

from __future__ import annotations

from treadle.events.model import ObservationEvent
from treadle.runtime.agent import Agent
from treadle.runtime.conversation import Conversation
from treadle.runtime.llm.scripted import ScriptedModel
from treadle.runtime.parts import ConversationParts, build_parts
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status

from .test_conversation import FINISH, call


def terminal_then_finish(command: str) -> list[dict]:
    return [{"tool_calls": [call("terminal", {"command": command})]}, FINISH]


def outputs(conversation: Conversation) -> list[str]:
    path = conversation.active_path()
    return [
        e.content for e in path if isinstance(e, ObservationEvent) and e.tool_name == "terminal"
    ]


def reader_of(parts: ConversationParts) -> ConversationParts:
    """``parts`` with a model that reads the variable the first run set (its script goes on
    from the first run's: the scripted model answers by its place in the conversation)."""
    script = [*terminal_then_finish("export X=kept"), *terminal_then_finish("echo X=$X")]
    reader = Agent(
        ScriptedModel.from_responses(script),
        parts.agent.tools,
        system_prompt=parts.agent.system_prompt,
    )
    return parts.replace(agent=reader)


def settings_in(workspace) -> ConversationSettings:
    return ConversationSettings.scripted_inline(
        terminal_then_finish("export X=kept"), workspace, sandbox={"kind": "none"}
    )


def test_given_parts_outlive_the_conversation_objects_that_ran_them(store, workspace):
    """The caller built the parts: closing the conversation leaves its shell (the variable the
    run exported) for the next object on those parts, until the caller closes them."""
    settings = settings_in(workspace)
    parts = build_parts(store, settings)
    try:
        with Conversation.create(store, settings, parts=parts) as first:
            first.send_message("set")
            assert first.run() is Status.FINISHED
        with Conversation.open(store, first.id, parts=reader_of(parts)) as again:
            again.send_message("read")
            assert again.run() is Status.FINISHED
            assert outputs(again)[-1].startswith("X=kept\n")
    finally:
        parts.close()


def test_built_parts_are_closed_with_their_conversation(store, workspace):
    """The conversation built its parts: closing it ends its shell, so the next one starts
    afresh (the variable is gone)."""
    settings = settings_in(workspace)
    with Conversation.create(store, settings) as first:
        first.send_message("set")
        assert first.run() is Status.FINISHED
    parts = build_parts(store, settings)
    try:
        with Conversation.open(store, first.id, parts=reader_of(parts)) as again:
            again.send_message("read")
            assert again.run() is Status.FINISHED
            assert outputs(again)[-1].startswith("X=\n")  # a new shell: never set
    finally:
        parts.close()
