"""Run extensions: a capability of the caller's own (``ConversationParts.extensions``) is called
at the loop's points in order, and what it returns changes the run as the protocol says."""

from __future__ import annotations

import json
from pathlib import Path

from treadle import RunExtension, RunScope
from treadle.events.model import MessageEvent, ObservationEvent, UserRejectionEvent
from treadle.runtime.conversation import Conversation
from treadle.runtime.extensions import CallResult, Screened
from treadle.runtime.parts import build_parts
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status


def settings_for(workspace: Path, responses) -> ConversationSettings:
    script = workspace.parent / "script.json"
    script.write_text(json.dumps({"responses": responses}))
    return ConversationSettings.scripted(script, workspace, tools=("think", "finish"))


def think(thought: str) -> dict:
    return {"tool_calls": [{"name": "think", "arguments": {"thought": thought}}]}


FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


class Recorder(RunExtension):
    """Records each point it is called at; changes nothing."""

    def __init__(self) -> None:
        self.points: list[str] = []

    def opened(self, scope: RunScope) -> None:
        self.points.append("opened")

    def system_prompt(self, scope, event):
        self.points.append("system_prompt")
        return event

    def conversation_started(self, scope: RunScope) -> None:
        self.points.append("conversation_started")

    def screen_message(self, scope, text):
        self.points.append(f"screen_message:{text}")
        return []

    def shape_message(self, scope, message):
        self.points.append("shape_message")
        return message

    def run_started(self, scope: RunScope) -> None:
        self.points.append("run_started")

    def before_model_call(self, scope: RunScope) -> str | None:
        self.points.append("before_model_call")
        return None

    def before_request(self, scope: RunScope) -> None:
        self.points.append("before_request")

    def screen_calls(self, scope: RunScope, screened: Screened) -> Screened:
        self.points.append("screen_calls:" + ",".join(a.tool_name for a in screened.allowed))
        return screened

    def after_call(self, scope, action, result: CallResult) -> CallResult:
        self.points.append(f"after_call:{action.tool_name}")
        return result

    def after_batch(self, scope, actions) -> None:
        self.points.append(f"after_batch:{len(actions)}")

    def at_stop(self, scope: RunScope, last_message: str) -> MessageEvent | None:
        self.points.append(f"at_stop:{last_message}")
        return None


def run_with(store, workspace, responses, *extensions, message="go"):
    settings = settings_for(workspace, responses)
    parts = build_parts(store, settings).replace(extensions=extensions)
    try:
        with Conversation.create(store, settings, parts=parts) as conversation:
            conversation.send_message(message)
            status = conversation.run(max_steps=10)
            return status, conversation.status_reason, conversation.active_path()
    finally:
        parts.close()  # the caller built them: the caller closes them


def test_an_extension_of_the_callers_own_sees_every_point_in_the_loops_order(store, workspace):
    recorder = Recorder()
    status, _why, _path = run_with(store, workspace, [think("a"), FINISH], recorder)
    assert status is Status.FINISHED
    step = ["before_model_call", "before_request"]
    assert recorder.points == [
        "opened",
        "screen_message:go",
        "system_prompt",
        "conversation_started",
        "shape_message",
        "run_started",
        *step,
        "screen_calls:think",
        "after_call:think",
        "after_batch:1",
        *step,
        "screen_calls:finish",
        "after_call:finish",
        "after_batch:1",
        "at_stop:done",
    ]


class Rewrites(RunExtension):
    """Blocks every ``think`` call, marks each result, and keeps the agent going once."""

    def __init__(self) -> None:
        self.kept_going = False

    def screen_calls(self, scope: RunScope, screened: Screened) -> Screened:
        blocked = [a for a in screened.allowed if a.tool_name == "think"]
        rejections = [
            UserRejectionEvent(
                action_id=a.id,
                tool_call_id=a.tool_call_id,
                tool_name=a.tool_name,
                reason="no thinking here",
            )
            for a in blocked
        ]
        allowed = [a for a in screened.allowed if a not in blocked]
        return Screened(allowed, [*screened.rejections, *rejections], screened.ask)

    def after_call(self, scope, action, result: CallResult) -> CallResult:
        if isinstance(result, ObservationEvent):
            return result.model_copy(update={"content": result.content + " [seen]"})
        return result

    def at_stop(self, scope: RunScope, last_message: str) -> MessageEvent | None:
        if self.kept_going:
            return None
        self.kept_going = True
        return MessageEvent(source="user", text="once more")


def test_what_an_extension_returns_is_what_the_loop_stores(store, workspace):
    status, _why, path = run_with(store, workspace, [think("a"), FINISH, FINISH], Rewrites())
    assert status is Status.FINISHED
    rejected = [e for e in path if e.kind == "user_rejection"]
    assert [(e.tool_name, e.reason) for e in rejected] == [("think", "no thinking here")]
    assert not [e for e in path if e.kind == "observation" and e.tool_name == "think"]
    finishes = [e for e in path if e.kind == "observation" and e.tool_name == "finish"]
    assert len(finishes) == 2
    assert all(e.content.endswith(" [seen]") for e in finishes)
    users = [e.text for e in path if e.kind == "message" and e.source == "user"]
    assert users == ["go", "once more"]


class Stops(RunExtension):
    def before_model_call(self, scope: RunScope) -> str | None:
        return "the caller's quota is spent"


def test_an_extension_that_refuses_the_model_call_pauses_the_run_saying_why(store, workspace):
    status, why, path = run_with(store, workspace, [FINISH], Stops())
    assert status is Status.PAUSED
    assert why == "the caller's quota is spent"
    assert not [e for e in path if e.kind == "action"]  # the model was never asked
