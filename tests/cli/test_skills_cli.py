"""``treadle skills WORKSPACE`` lists what a run would load, and ``treadle run`` with a model on a
local OpenAI-compatible server sends AGENTS.md first and a triggered skill once."""

from __future__ import annotations

import json

from support.cli import invoke_treadle
from support.fake_openai import FakeOpenAIServer
from treadle.store.urls import open_store


def make_workspace(root):
    root.mkdir()
    (root / "AGENTS.md").write_text("Answer briefly.\n")
    (root / ".claude/skills/deploy").mkdir(parents=True)
    (root / ".claude/skills/deploy/SKILL.md").write_text(
        "---\nname: deploy\ndescription: Shipping\ntriggers: [deploy, ship]\n---\nRun make ship.\n"
    )
    (root / ".treadle/skills").mkdir(parents=True)
    (root / ".treadle/skills/bad.md").write_text("---\nname: [x\n---\nbody\n")
    return root


def test_skills_lists_what_would_load_as_json(tmp_path):
    workspace = make_workspace(tmp_path / "ws")
    result = invoke_treadle("skills", str(workspace), "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert listed["skills"] == [
        {
            "name": "agents",
            "source": "AGENTS.md",
            "always_on": True,
            "triggers": [],
            "description": None,
            "bytes": len("Answer briefly.\n"),
        },
        {
            "name": "deploy",
            "source": ".claude/skills/deploy/SKILL.md",
            "always_on": False,
            "triggers": ["deploy", "ship"],
            "description": "Shipping",
            "bytes": (workspace / ".claude/skills/deploy/SKILL.md").stat().st_size,
        },
    ]
    (skipped,) = listed["skipped"]
    assert skipped["source"] == ".treadle/skills/bad.md"
    assert skipped["error"].startswith("line 3: bad YAML")


def test_skills_table_and_warnings(tmp_path):
    workspace = make_workspace(tmp_path / "ws")
    result = invoke_treadle("skills", str(workspace), columns=200)
    assert result.returncode == 0, result.stderr
    assert "always (system prompt)" in result.stdout
    assert "deploy, ship" in result.stdout
    assert "warning: skipped .treadle/skills/bad.md: line 3: bad YAML" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no skills" in invoke_treadle("skills", str(empty)).stdout


def test_skills_of_a_missing_folder_is_bad_input(tmp_path):
    result = invoke_treadle("skills", str(tmp_path / "absent"))
    assert result.returncode == 2
    assert "is not a folder" in result.stderr


def test_run_sends_agents_md_first_and_the_triggered_skill_once(tmp_path):
    workspace = make_workspace(tmp_path / "ws")
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    with FakeOpenAIServer([{"text": "shipped"}]) as server:
        result = invoke_treadle(
            "run", "please deploy it, deploy now", "--create-workspace", "--workspace", str(workspace),
            "--model", "openai/test-model", "--base-url", server.base_url, "--store", store_url,
            env={"TREADLE_API_KEY": ""}, columns=200,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (request,) = server.requests
    system, user = request["body"]["messages"]
    assert "Answer briefly." in system["content"]
    assert user["content"].count("Run make ship.") == 1
    assert "[skills: deploy]" in result.stdout  # the live view says which were added
    assert "skills loaded: agents, deploy; skipped .treadle/skills/bad.md: line 3: bad" in " ".join(
        result.stdout.split()
    )
    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
        events = [item.event for item in store.get_range(info.id, 0, 100)]
    finally:
        store.close()
    message = next(e for e in events if e.kind == "message" and e.role == "user")
    assert message.activated_skills == ("deploy",)


def test_bench_skills_measures_a_real_match():
    result = invoke_treadle("bench", "skills", "--skills", "4", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["skill_files"] == 4
    assert figures["load_empty_workspace_s"] > 0
    assert 0 < figures["load_s"] < 10
    assert 0 < figures["match_s"] < 1
