"""``treadle replay --mode recorded`` of a conversation whose confirmed call was killed (issue 28,
defect 2): the call waited for confirmation, was confirmed, the process died while it ran, the
next run closed it as a crash. The replay dies where the recording did and goes on: exit 0,
never a traceback."""

from __future__ import annotations

from support.cli import run_treadle
from treadle.runtime.conversation import Conversation
from treadle.runtime.log import ConversationLog
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus
from treadle.store.urls import open_store

WRITE = {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo a > a.txt"}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def test_a_replay_of_a_confirmed_call_killed_mid_run_ends_clean(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    try:
        settings = ConversationSettings.scripted_inline(
            [WRITE, FINISH], workspace, confirmation="risky", sandbox={"kind": "none"}
        )
        with Conversation.create(store, settings) as conversation:
            conversation.send_message("write")
            assert conversation.run() is ConversationStatus.WAITING_FOR_CONFIRMATION
            cid = conversation.id
        # What a kill during the confirmed call leaves: "running", the call open.
        ConversationLog(store, cid).record_status(
            ConversationStatus.RUNNING, "confirmed by the user"
        )
        with Conversation.open(store, cid) as reopened:
            assert reopened.run() is ConversationStatus.FINISHED  # closed as a crash first
            crashed = [e for e in reopened.active_path() if getattr(e, "interrupted", None)]
            assert [e.interrupted for e in crashed] == ["crash"]
    finally:
        store.close()
    replayed = run_treadle("replay", cid, "--mode", "recorded", "--store", url)
    assert "Traceback" not in replayed.stderr, replayed.stderr
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
