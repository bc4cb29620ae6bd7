"""``treadle run -c TEXT`` (issue 26): continuing the last conversation of the current workspace
(or of ``--workspace DIR``), as ``--conversation ID TEXT`` does; one line and exit 2 when the
workspace has none."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.cli import invoke_treadle
from support.scripts import write_script
from treadle.events.model import MessageEvent
from treadle.store.urls import open_store


def treadle(*args: str) -> subprocess.CompletedProcess[str]:
    return invoke_treadle(*args, columns=200, drop=("TREADLE_STORE", "TREADLE_MODEL"))


def said(url: str, conversation_id: str) -> list[str]:
    """The user messages of a stored conversation, in order."""
    store = open_store(url)
    try:
        events = [item.event for item in store.get_range(conversation_id, 0, 10**6)]
    finally:
        store.close()
    return [e.text for e in events if isinstance(e, MessageEvent) and e.role == "user"]


def ids_by_title(url: str) -> dict[str, str]:
    store = open_store(url)
    try:
        return {info.title or "": info.id for info in store.list_conversations()}
    finally:
        store.close()


def test_dash_c_continues_the_last_conversation_of_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    script = write_script(tmp_path, [{"text": "one"}, {"text": "two"}, {"text": "three"}])
    here, there, empty = tmp_path / "here", tmp_path / "there", tmp_path / "empty"
    for folder in (here, there, empty):
        folder.mkdir()
    for title, folder in (("older", here), ("newer", here), ("elsewhere", there)):
        made = treadle(
            "run", title, "--workspace", str(folder), "--script", str(script), "--sandbox",
            "none", "--store", url,
        )  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
    ids = ids_by_title(url)

    monkeypatch.chdir(here)  # the child runs in the current folder
    again = treadle("run", "-c", "and again", "--store", url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"conversation: {ids['newer']}" in again.stdout
    assert said(url, ids["newer"]) == ["newer", "and again"]
    assert said(url, ids["older"]) == ["older"]

    # --workspace names another folder; --continue is the long name
    there_again = treadle("run", "--continue", "more", "--workspace", str(there), "--store", url)
    assert there_again.returncode == 0, there_again.stdout + there_again.stderr
    assert said(url, ids["elsewhere"]) == ["elsewhere", "more"]

    # the most recently updated wins: "older" continued by id, then -c picks it
    assert treadle("run", "--conversation", ids["older"], "bump", "--store", url).returncode == 0
    last = treadle("run", "-c", "last", "--store", url)
    assert last.returncode == 0, last.stdout + last.stderr
    assert said(url, ids["older"]) == ["older", "bump", "last"]

    monkeypatch.chdir(empty)
    none = treadle("run", "-c", "hello", "--store", url)
    assert none.returncode == 2
    assert none.stderr.strip().count("\n") == 0, none.stderr  # one line
    assert f"no conversation to continue in workspace {empty.resolve()}" in none.stderr

    both = treadle("run", "-c", "x", "--conversation", ids["older"], "--store", url)
    assert both.returncode == 2
    assert "not both" in both.stderr
    assert said(url, ids["older"]) == ["older", "bump", "last"]  # nothing stored by refusals


def test_a_continued_conversation_takes_another_model_from_that_point_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    first_script = write_script(tmp_path, [{"text": "first model"}, {"text": "never asked"}])
    # a scripted model answers by position on the path: one placeholder for the first answer
    second_script = write_script(
        tmp_path, [{"text": "placeholder"}, {"text": "second model"}, {"text": "third"}]
    )
    made = treadle(
        "run", "hello", "--workspace", str(workspace), "--script", str(first_script),
        "--confirm", "risky", "--sandbox", "none", "--store", url,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    (conversation_id,) = ids_by_title(url).values()

    switched = treadle(
        "run", "--conversation", conversation_id, "again", "--script", str(second_script),
        "--store", url,
    )  # fmt: skip
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert "second model" in switched.stdout
    assert "never asked" not in switched.stdout
    told = f"model changed from scripted {first_script.resolve()} to scripted"
    assert told in switched.stdout  # the live view shows the fact

    store = open_store(url)
    try:
        info = store.get_conversation(conversation_id)
        events = [item.event for item in store.get_range(conversation_id, 0, 10**6)]
    finally:
        store.close()
    settings = info.metadata["settings"]
    assert settings["model"]["script"] == str(second_script.resolve())
    assert settings["confirmation"] == "risky"  # every other setting kept
    assert settings["workspace"] == str(workspace.resolve())
    facts = [e for e in events if e.kind == "state_change" and e.key == "model"]
    assert len(facts) == 1
    assert facts[0].value == {
        "from": {"kind": "scripted", "model": None, "base_url": None,
                 "script": str(first_script.resolve())},
        "to": {"kind": "scripted", "model": None, "base_url": None,
               "script": str(second_script.resolve())},
    }  # fmt: skip

    # the same model again: nothing to record; the next run keeps the new model
    same = treadle(
        "run", "--conversation", conversation_id, "--script", str(second_script), "more",
        "--store", url,
    )  # fmt: skip
    assert same.returncode == 0, same.stdout + same.stderr
    assert "model changed" not in same.stdout
    logged = treadle("log", conversation_id, "--store", url)
    assert logged.returncode == 0, logged.stderr
    assert told in " ".join(logged.stdout.split())  # treadle log shows it too
    assert logged.stdout.count("model changed") == 1

    # other settings are still kept: a different --confirm is refused as before
    refused = treadle(
        "run", "--conversation", conversation_id, "x", "--confirm", "always", "--store", url,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--confirm (stored: risky)" in refused.stderr
