"""Finding a workspace's skills: both layouts, their order and names, and hostile files
(huge, broken, links out, FIFOs, binary, odd names) skipped with the reason while others load."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from treadle.runtime.skills import MAX_SKILL_FILE_BYTES, MAX_SKILLS_TOTAL_BYTES, load_skills
from treadle.runtime.skills.loading import MAX_FILES_PER_FOLDER


def write(root: Path, relative: str, text: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def triggered(name: str, *words: str, body: str = "body") -> str:
    return f"---\nname: {name}\ntriggers: [{', '.join(words)}]\n---\n{body}\n"


def skipped(loaded) -> dict[str, str]:
    return {item.source: item.error for item in loaded.skipped}


def test_every_place_and_both_layouts_load_in_order(workspace):
    write(workspace, "AGENTS.md", "Use tabs.\n")
    write(workspace, ".openhands/microagents/repo.md", "Repository notes.\n")
    write(workspace, ".treadle/skills/b.md", triggered("bee", "bees"))
    write(workspace, ".treadle/skills/a.md", triggered("ant", "ants"))
    write(workspace, ".openhands/skills/docker.md", triggered("docker", "docker"))
    write(workspace, ".openhands/skills/README.md", "Not a skill.\n")
    write(workspace, ".openhands/microagents/legacy.md", "Always on, no front matter.\n")
    write(workspace, ".claude/skills/deploy/SKILL.md", "---\ndescription: Deploying\n---\nSteps.")
    write(workspace, ".claude/skills/deploy/reference.md", "Read by the agent, not loaded.")
    write(workspace, ".claude/skills/empty-folder/notes.txt", "no SKILL.md here")
    loaded = load_skills(workspace)
    assert loaded.skipped == []
    found = [(s.name, s.source, s.triggers) for s in loaded.skills]
    assert found == [
        ("agents", "AGENTS.md", ()),
        ("repo", ".openhands/microagents/repo.md", ()),
        ("ant", ".treadle/skills/a.md", ("ants",)),
        ("bee", ".treadle/skills/b.md", ("bees",)),
        ("docker", ".openhands/skills/docker.md", ("docker",)),
        ("legacy", ".openhands/microagents/legacy.md", ()),
        ("deploy", ".claude/skills/deploy/SKILL.md", ()),
    ]
    deploy = loaded.skills[-1]
    assert (deploy.description, deploy.content, deploy.always_on) == ("Deploying", "Steps.", True)
    assert loaded.skills[0].size == len("Use tabs.\n")


def test_agents_md_triggers_are_ignored_it_is_always_on(workspace):
    write(workspace, "AGENTS.md", triggered("rules", "never"))
    (skill,) = load_skills(workspace).skills
    assert (skill.name, skill.always_on) == ("rules", True)


def test_a_missing_workspace_or_one_without_skills_loads_nothing(tmp_path, workspace):
    assert load_skills(tmp_path / "absent").skills == []
    empty = load_skills(workspace)
    assert (empty.skills, empty.skipped) == ([], [])


def test_bad_front_matter_is_skipped_naming_file_and_line_and_the_rest_load(workspace):
    write(workspace, ".openhands/skills/bad.md", "---\nname: ok\ntriggers: [a, b\n---\nbody")
    write(workspace, ".openhands/skills/good.md", triggered("good", "fine"))
    loaded = load_skills(workspace)
    assert [s.name for s in loaded.skills] == ["good"]
    error = skipped(loaded)[".openhands/skills/bad.md"]
    assert error.startswith("line 4: bad YAML")


def test_a_huge_file_is_not_read_and_says_so(workspace):
    write(workspace, "AGENTS.md", b"x" * (MAX_SKILL_FILE_BYTES + 1))
    write(workspace, ".treadle/skills/small.md", triggered("small", "tiny"))
    loaded = load_skills(workspace)
    assert [s.name for s in loaded.skills] == ["small"]
    assert skipped(loaded) == {
        "AGENTS.md": f"is {MAX_SKILL_FILE_BYTES + 1} bytes, over the {MAX_SKILL_FILE_BYTES}-byte "
        "limit for a skill file: not loaded"
    }


def test_the_total_is_capped(workspace):
    count = MAX_SKILLS_TOTAL_BYTES // (MAX_SKILL_FILE_BYTES - 10) + 1
    for index in range(count):
        write(workspace, f".treadle/skills/s{index}.md", "y" * (MAX_SKILL_FILE_BYTES - 10))
    loaded = load_skills(workspace)
    assert sum(len(s.content) for s in loaded.skills) <= MAX_SKILLS_TOTAL_BYTES
    assert len(loaded.skills) == count - 1
    (error,) = skipped(loaded).values()
    assert f"over {MAX_SKILLS_TOTAL_BYTES} bytes in all" in error


def test_a_folder_with_too_many_files_loads_the_first_ones(workspace):
    for index in range(MAX_FILES_PER_FOLDER + 2):
        write(workspace, f".treadle/skills/s{index:04}.md", f"skill {index}")
    loaded = load_skills(workspace)
    assert len(loaded.skills) == MAX_FILES_PER_FOLDER
    assert "over the limit of 200" in skipped(loaded)[".treadle/skills"]


def test_links_out_of_the_workspace_are_refused_and_links_inside_followed(tmp_path, workspace):
    secret = write(tmp_path, "outside/secret.md", "secret text")
    write(tmp_path, "outside/skills/x.md", "also outside")
    write(workspace, "docs/shared.md", triggered("shared", "share"))
    (workspace / ".openhands/skills").mkdir(parents=True)
    (workspace / ".openhands/skills/out.md").symlink_to(secret)
    (workspace / ".openhands/skills/in.md").symlink_to(workspace / "docs/shared.md")
    (workspace / ".claude").mkdir()
    (workspace / ".claude/skills").symlink_to(tmp_path / "outside/skills")
    (workspace / "AGENTS.md").symlink_to("../outside/secret.md")
    loaded = load_skills(workspace)
    assert [(s.name, s.source) for s in loaded.skills] == [("shared", ".openhands/skills/in.md")]
    errors = skipped(loaded)
    assert set(errors) == {"AGENTS.md", ".openhands/skills/out.md", ".claude/skills"}
    assert all("is a link out of the workspace" in error for error in errors.values())
    assert all("secret text" not in s.content for s in loaded.skills)


def test_a_link_loop_is_refused(workspace):
    (workspace / ".treadle/skills").mkdir(parents=True)
    (workspace / ".treadle/skills/loop.md").symlink_to(workspace / ".treadle/skills/loop.md")
    loaded = load_skills(workspace)
    assert loaded.skills == []
    assert "loop" in skipped(loaded)[".treadle/skills/loop.md"]


def test_a_fifo_does_not_block_and_binary_files_are_refused(workspace):
    (workspace / ".treadle/skills").mkdir(parents=True)
    os.mkfifo(workspace / ".treadle/skills/pipe.md")
    write(workspace, ".treadle/skills/nul.md", b"text\x00more")
    write(workspace, ".treadle/skills/latin1.md", "caf\xe9".encode("latin-1"))
    write(workspace, ".treadle/skills/ok.md", "fine")
    (workspace / ".treadle/skills/folder.md").mkdir()
    result: list = []
    reader = threading.Thread(target=lambda: result.append(load_skills(workspace)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert result, "reading a FIFO blocked"
    (loaded,) = result
    assert [s.name for s in loaded.skills] == ["ok"]
    assert skipped(loaded) == {
        ".treadle/skills/pipe.md": "is not a regular file: refused",
        ".treadle/skills/folder.md": "is not a regular file: refused",
        ".treadle/skills/nul.md": "holds NUL bytes: not a text file",
        ".treadle/skills/latin1.md": "is not UTF-8 text (byte 3)",
    }


def test_odd_names(workspace):
    write(workspace, ".treadle/skills/ünï cødé ✓.md", "unicode file name")
    write(workspace, ".treadle/skills/tab\there.md", "a tab in the file name")
    write(workspace, ".treadle/skills/empty.md", "---\nname: empty\n---\n   \n")
    write(workspace, ".openhands/skills/dup.md", "---\nname: ünï cødé ✓\n---\nsame name")
    write(workspace, "AGENTS.md", '\ufeffBOM first, <skill> & "quotes"\n')
    loaded = load_skills(workspace)
    assert [(s.name, s.content) for s in loaded.skills] == [
        ("agents", 'BOM first, <skill> & "quotes"'),
        ("ünï cødé ✓", "unicode file name"),
    ]
    errors = skipped(loaded)
    assert "another skill is already called 'ünï cødé ✓'" in errors[".openhands/skills/dup.md"]
    assert errors[".treadle/skills/empty.md"].startswith("has no text")
    assert "its file name cannot be one" in errors[".treadle/skills/tab\there.md"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_skipped(workspace):
    path = write(workspace, ".treadle/skills/locked.md", "private")
    path.chmod(0)
    try:
        loaded = load_skills(workspace)
    finally:
        path.chmod(0o644)
    assert loaded.skills == []
    assert skipped(loaded)[".treadle/skills/locked.md"].startswith("cannot be read")


def test_every_file_opened_is_closed_whatever_it_held(tmp_path, workspace):
    write(tmp_path, "outside.md", "outside")
    write(workspace, "AGENTS.md", b"x" * (MAX_SKILL_FILE_BYTES + 1))
    write(workspace, ".treadle/skills/nul.md", b"\x00")
    write(workspace, ".treadle/skills/bad.md", "---\nname: [\n---\nx")
    write(workspace, ".treadle/skills/good.md", "fine")
    os.mkfifo(workspace / ".treadle/skills/pipe.md")
    (workspace / ".treadle/skills/out.md").symlink_to(tmp_path / "outside.md")
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(20):
        loaded = load_skills(workspace)
    assert [s.name for s in loaded.skills] == ["good"]
    assert len(loaded.skipped) == 5
    assert sorted(os.listdir("/proc/self/fd")) == before
