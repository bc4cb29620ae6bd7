"""Crash recovery with a real SIGKILL of the process running a tool: the reopened conversation
closes the interrupted call before the model is asked again, so no provider sees it unanswered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from treadle.runtime.conversation import Conversation
from treadle.runtime.status import ConversationStatus

CHILD = textwrap.dedent(
    """
    import sys
    from treadle.runtime.conversation import Conversation
    from treadle.runtime.settings import ConversationSettings
    from treadle.store.urls import open_store

    store_url, script, workspace = sys.argv[1:4]
    store = open_store(store_url)
    conversation = Conversation.create(
        store, ConversationSettings.scripted(script, workspace), id="crash-me"
    )
    conversation.send_message("run the long command")
    conversation.run()
    """
)


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_sigkill_mid_tool_then_resume_and_finish(store, store_file, workspace, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [
                    {
                        "tool_calls": [
                            {
                                "id": "c-long",
                                "name": "terminal",
                                "arguments": {"command": "touch started && sleep 60"},
                            }
                        ]
                    },
                    {
                        "tool_calls": [
                            {
                                "id": "c-done",
                                "name": "finish",
                                "arguments": {"message": "recovered"},
                            }
                        ]
                    },
                ]
            }
        )
    )
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, f"sqlite:///{store_file}", str(script), str(workspace)],
        start_new_session=True,
    )
    try:
        wait_for(lambda: (workspace / "started").exists())  # the tool is running now
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL

    with Conversation.open(store, "crash-me") as reopened:
        assert [a.tool_call_id for a in reopened.pending_actions()] == ["c-long"]
        assert reopened.status is ConversationStatus.RUNNING  # what the killed process left
        assert reopened.run() is ConversationStatus.FINISHED
        path = reopened.active_path()
    error = next(e for e in path if e.kind == "agent_error")
    assert error.tool_call_id == "c-long"
    assert "interrupted" in error.error
    kinds = [e.kind for e in path]
    # the interrupted call is answered before the model is asked again
    assert kinds.index("agent_error") < max(i for i, k in enumerate(kinds) if k == "action")
