"""The library's front door: ``import treadle`` and ``import treadle.client`` load no runtime
(checked in a fresh interpreter: ``sys.modules``), every name ``treadle`` offers resolves, and
the README's Python examples marked ``<!-- test: run -->`` run as written, offline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import treadle

SRC = Path(treadle.__file__).resolve().parents[1]
README = SRC.parent / "README.md"
HEAVY = (
    "treadle.runtime",
    "treadle.store",
    "treadle.server",
    "treadle.cli",
    "treadle.bench",
    "litellm",
    "openai",
    "fastapi",
    "starlette",
    "uvicorn",
    "psycopg",
    "mcp",
)
"""What a client must not load: the runtime (agent, tools, bash session, LiteLLM), the store,
the server and their libraries."""


def run_python(code: str, cwd: Path | None = None) -> str:
    """Run ``code`` in a fresh interpreter using this checkout's ``treadle``; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def loaded_after(statement: str) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    return json.loads(run_python(code).splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_import_treadle_loads_nothing_but_itself() -> None:
    modules = loaded_after("import treadle")
    assert [m for m in modules if m.startswith("treadle")] == ["treadle"]
    assert heavy(modules) == []


def test_import_treadle_client_loads_no_runtime_store_or_server() -> None:
    modules = loaded_after("import treadle.client")
    assert heavy(modules) == []
    assert "treadle.api" in modules  # the client reads the shared wire models


def test_settings_and_client_from_the_front_door_load_no_runtime() -> None:
    # What a client program does before it talks to a server: build settings, open a client.
    statement = (
        "from treadle import ConversationSettings, TreadleClient, NotFound, Unauthorized\n"
        "settings = ConversationSettings.scripted_inline([{'text': 'hi'}], '/tmp/w')\n"
        "assert ConversationSettings.model_validate(settings.to_metadata()) == settings\n"
        "TreadleClient('http://127.0.0.1:9').close()"
    )
    assert heavy(loaded_after(statement)) == []


def test_every_front_door_name_resolves() -> None:
    assert set(treadle.__all__) == {"__version__", *treadle._EXPORTS}
    for name in treadle.__all__:
        assert getattr(treadle, name) is not None, name
    from treadle.runtime.conversation import Conversation
    from treadle.runtime.settings import ConversationSettings

    assert treadle.Conversation is Conversation
    assert treadle.ConversationSettings is ConversationSettings  # one class, two homes
    assert issubclass(treadle.Unauthorized, treadle.TreadleError)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        treadle.Nope  # noqa: B018


def readme_blocks() -> list[str]:
    """The README's Python blocks marked to run (the marker is the line before the fence)."""
    text = README.read_text(encoding="utf-8")
    return re.findall(r"<!-- test: run -->\n```python\n(.*?)```", text, flags=re.S)


def test_the_readme_local_example_runs_offline(tmp_path: Path) -> None:
    blocks = readme_blocks()
    assert blocks, "no README block is marked <!-- test: run -->"
    for block in blocks:
        assert len(block.strip().splitlines()) <= 7  # the six-line example stays short
        output = run_python(block, cwd=tmp_path)
        assert output.strip() == "finished Hello!"
    assert (tmp_path / "treadle.db").is_file()
    assert (tmp_path / "work").is_dir()
