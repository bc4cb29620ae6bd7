"""``treadle run`` checks before anything is created or spent (issue 26): the workspace is the
current folder by default and a missing one is refused unless --create-workspace; a misspelt
model, a missing key and a base URL nothing answers at are refused before a conversation
exists; --api-key-file."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from support.cli import invoke_treadle, run_treadle
from support.fake_openai import FakeOpenAIServer
from treadle.store.urls import open_store

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "ok"}}]}


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"responses": [FINISH]}))
    return path


def _conversations(url: str) -> int:
    store = open_store(url)
    try:
        return len(store.list_conversations())
    finally:
        store.close()


def test_a_missing_workspace_is_refused_unless_create_workspace(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    typo = tmp_path / "wrokspace"
    args = ("--script", str(_script(tmp_path)), "--sandbox", "none", "--store", url)
    refused = invoke_treadle("run", "x", "--workspace", str(typo), *args)
    assert refused.returncode == 2
    assert "does not exist" in refused.stderr
    assert "--create-workspace" in refused.stderr
    assert not typo.exists()
    made = invoke_treadle("run", "x", "--workspace", str(typo), "--create-workspace", *args)
    assert made.returncode == 0, made.stderr
    assert typo.is_dir()


def test_the_workspace_defaults_to_the_current_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    here = tmp_path / "here"
    here.mkdir()
    script = _script(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "treadle", "run", "x", "--script", str(script), "--sandbox",
         "none", "--store", url],
        cwd=here, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    store = open_store(url)
    (info,) = store.list_conversations()
    store.close()
    assert info.metadata["settings"]["workspace"] == str(here.resolve())


def test_a_misspelt_model_and_a_missing_key_are_refused_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    invoke_treadle("store", "info", "--store", url)
    bare = {"TREADLE_API_KEY": "", "OPENAI_API_KEY": "", "TREADLE_BASE_URL": ""}
    misspelt = invoke_treadle(
        "run", "x", "--workspace", str(tmp_path), "--model", "gtp-4o-mni", "--store", url,
        env=bare, drop=("TREADLE_STORE", "TREADLE_API_KEY", "OPENAI_API_KEY", "TREADLE_BASE_URL"),
    )  # fmt: skip
    assert misspelt.returncode == 2
    assert "LiteLLM does not know this model" in misspelt.stderr
    keyless = invoke_treadle(
        "run", "x", "--workspace", str(tmp_path), "--model", "gpt-4o-mini", "--store", url,
        drop=("TREADLE_STORE", "TREADLE_API_KEY", "OPENAI_API_KEY", "TREADLE_BASE_URL"),
    )  # fmt: skip
    assert keyless.returncode == 2
    assert "needs an API key: set TREADLE_API_KEY or give --api-key-file FILE" in keyless.stderr
    assert not Path(url.removeprefix("sqlite:///")).exists() or _conversations(url) == 0


def test_the_model_check_reads_litellms_prices_offline(tmp_path: Path) -> None:
    """A process of its own (LiteLLM not yet imported), with LiteLLM's own switch unset: a bare
    ``import litellm`` fetched its price map from GitHub first, three tries and three warnings
    (7 s offline) before the check could answer."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    keyless = run_treadle(
        "run", "x", "--workspace", str(tmp_path), "--model", "gpt-4o-mini", "--store", url,
        drop=("TREADLE_STORE", "TREADLE_API_KEY", "OPENAI_API_KEY", "TREADLE_BASE_URL",
              "LITELLM_LOCAL_MODEL_COST_MAP"),
    )  # fmt: skip
    assert keyless.returncode == 2
    assert "needs an API key" in keyless.stderr
    assert "cost map" not in keyless.stderr
    assert "raw.githubusercontent.com" not in keyless.stderr


def test_api_key_file_gives_the_key_and_bad_files_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    refused = invoke_treadle(
        "run", "x", "--workspace", str(tmp_path), "--script", str(_script(tmp_path)),
        "--sandbox", "none", "--store", url, "--api-key-file", str(empty),
    )  # fmt: skip
    assert refused.returncode == 2
    assert "must hold one key" in refused.stderr
    key = tmp_path / "model.key"
    key.write_text("sk-from-a-file-12345\n")
    done = invoke_treadle(
        "run", "x", "--workspace", str(tmp_path), "--model", "gpt-4o-mini", "--store", url,
        "--api-key-file", str(key), "--model-deadline", "0.5",
        drop=("TREADLE_STORE", "TREADLE_API_KEY", "OPENAI_API_KEY", "TREADLE_BASE_URL"),
    )  # fmt: skip
    # The key check passed (no model is reachable here: the run itself may fail after).
    assert "needs an API key" not in done.stderr
    assert "sk-from-a-file-12345" not in done.stdout + done.stderr


def test_eval_run_reads_its_key_from_a_file_too(tmp_path: Path) -> None:
    empty = tmp_path / "empty.key"
    empty.write_text("# no key here\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    refused = invoke_treadle(
        "eval", "run", str(tasks), "--store", f"sqlite:///{tmp_path / 's.db'}",
        "--api-key-file", str(empty),
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--api-key-file" in refused.stderr
    assert "must hold one key" in refused.stderr


def test_eval_run_checks_each_model_before_anything_runs(tmp_path: Path) -> None:
    """A misspelt model in one task, or the eval's model without a key: exit 2 before Ray
    starts or any task runs (each attempt was spent on it, and the tasks showed not_run)."""
    start = tmp_path / "start"
    start.mkdir()
    url = f"sqlite:///{tmp_path / 's.db'}"
    task = {"instruction": "go", "workspace": str(start), "verify": "true"}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({**task, "id": "a"})
        + "\n"
        + json.dumps({**task, "id": "b", "model": {"kind": "litellm", "model": "gtp-4o-mni"}})
        + "\n"
    )
    bare = ("TREADLE_STORE", "TREADLE_API_KEY", "OPENAI_API_KEY", "TREADLE_BASE_URL")
    misspelt = invoke_treadle(
        "eval", "run", str(tasks), "--store", url, "--model", "gpt-4o-mini",
        env={"TREADLE_API_KEY": "sk-test-0123456789"}, drop=bare[:1] + bare[2:],
    )  # fmt: skip
    assert misspelt.returncode == 2, misspelt.stdout + misspelt.stderr
    assert "'gtp-4o-mni': LiteLLM does not know this model" in misspelt.stderr
    keyless = invoke_treadle(
        "eval", "run", str(tasks), "--store", url, "--model", "gpt-4o-mini", drop=bare
    )  # fmt: skip
    assert keyless.returncode == 2
    assert "needs an API key: set TREADLE_API_KEY" in keyless.stderr
    assert not Path(url.removeprefix("sqlite:///")).exists() or _conversations(url) == 0


def test_a_base_url_that_does_not_answer_is_refused_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:  # a port nothing listens on (bound, then let go)
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    url = f"sqlite:///{tmp_path / 's.db'}"
    invoke_treadle("store", "info", "--store", url)
    refused = invoke_treadle(
        "run", "x", "--workspace", str(tmp_path), "--model", "openai/m", "--base-url", closed,
        "--store", url,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert f"--base-url {closed} does not answer" in refused.stderr
    assert "Connection refused" in refused.stderr or "connect" in refused.stderr.lower()
    assert _conversations(url) == 0
    with FakeOpenAIServer([{"text": "hello"}]) as server:  # a server answers: the run goes on
        done = invoke_treadle(
            "run", "x", "--workspace", str(tmp_path), "--model", "openai/m",
            "--base-url", server.base_url, "--store", url, "--sandbox", "none",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _conversations(url) == 1
