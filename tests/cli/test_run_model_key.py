"""``treadle run`` reads the model key (TREADLE_API_KEY) at its edge and gives it to the
runtime to mask: a tool output that shows it is stored masked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from treadle.store.urls import open_store

KEY = "sk-edge-key-0123456789"


def test_run_masks_the_model_key_of_its_environment(tmp_path):
    script = tmp_path / "script.json"
    # The key written out literally (not read from the shell's environment, which lacks it).
    command = {"name": "terminal", "arguments": {"command": f"echo {KEY}"}}
    finish = {"name": "finish", "arguments": {"message": "done"}}
    script.write_text(
        json.dumps({"responses": [{"tool_calls": [command]}, {"tool_calls": [finish]}]})
    )
    store_url = f"sqlite:///{tmp_path / 'run.db'}"
    workspace = str(tmp_path / "ws")
    arguments = ["run", "show it", "--create-workspace", "--workspace", workspace]
    arguments += ["--script", str(script)]
    result = subprocess.run(
        [sys.executable, "-m", "treadle", *arguments, "--store", store_url],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TREADLE_API_KEY": KEY, "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    store = open_store(store_url)
    try:
        (info,) = store.list_conversations()
        events = [item.event for item in store.get_range(info.id, 0, 1000)]
    finally:
        store.close()
    output = next(e.content for e in events if e.kind == "observation")
    assert KEY not in output
    assert "<secret:TREADLE_API_KEY>" in output
