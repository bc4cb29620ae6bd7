"""Skill activations replay: a recorded replay (no workspace file read) and a rerun (in a fresh
workspace whose skill files changed) give the model what the recording gave it, so the replayed
system prompt and user messages carry the same skills."""

from __future__ import annotations

from support.replays import recorded
from treadle.events.model import MessageEvent
from treadle.runtime.replay import replay_recorded
from treadle.runtime.replay.rerun_mode import rerun

NO_SANDBOX = {"sandbox": {"kind": "none"}}


def skilled(workspace):
    (workspace / "AGENTS.md").write_text("Run make check first.\n")
    (workspace / ".treadle/skills").mkdir(parents=True)
    (workspace / ".treadle/skills/docker.md").write_text(
        "---\ntriggers: [docker]\n---\nUse slim images.\n"
    )


def test_a_recorded_replay_reproduces_the_skills_without_the_files(store, workspace):
    skilled(workspace)
    answers = [{"text": "one"}, {"text": "two"}, {"text": "three"}]
    conversation = recorded(
        store, workspace, answers, messages=("hi", "a docker question", "docker again"),
        **NO_SANDBOX,
    )  # fmt: skip
    path = store.path_to_root(conversation, store.head(conversation))
    users = [e for e in path if isinstance(e, MessageEvent) and e.role == "user"]
    assert [m.activated_skills for m in users] == [(), ("docker",), ()]
    (workspace / "AGENTS.md").unlink()
    (workspace / ".treadle/skills/docker.md").write_text("---\ntriggers: [hi]\n---\nChanged.\n")
    report = replay_recorded(store, conversation)
    assert report.same, [d.message for d in report.divergences]
    assert report.replayed_events == report.recorded_events


def test_a_rerun_gives_the_model_the_recorded_skills(store, workspace, tmp_path):
    skilled(workspace)
    conversation = recorded(
        store, workspace, [{"text": "ok"}], messages=("docker?",), snapshots={"enabled": False},
        **NO_SANDBOX,
    )  # fmt: skip
    (workspace / "AGENTS.md").write_text("Something else now.\n")
    report = rerun(store, conversation, workspace=workspace, into=tmp_path / "again")
    assert report.same, [d.message for d in report.divergences]
    path = store.path_to_root(report.new_conversation, store.head(report.new_conversation))
    assert "Run make check first." in path[0].context
    (user,) = [e for e in path if isinstance(e, MessageEvent) and e.role == "user"]
    assert user.activated_skills == ("docker",)
    assert "Use slim images." in user.extended_content[0]
