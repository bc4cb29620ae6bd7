"""REPLAY-RECORDED with hooks: a conversation whose hooks blocked a call, added context to a
prompt and to a result, and kept the agent going replays to the same events, and no hook
command runs during the replay."""

from __future__ import annotations

import json

from support.replays import FINISH, bash, recorded
from treadle.data.hooks import HookSettings
from treadle.events.model import MessageEvent, UserRejectionEvent
from treadle.runtime.replay import replay_recorded


def test_hook_decisions_replay_to_the_same_events_without_running_a_hook(
    store, workspace, tmp_path
):
    ran = tmp_path / "hook-runs.txt"
    stop_once = (
        f"echo stop >> {ran}; "
        f"[ $(grep -c stop {ran}) -gt 1 ] && exit 0; "
        'echo \'{"decision": "block", "reason": "check the file first"}\''
    )
    post = {"hookSpecificOutput": {"additionalContext": "lint: clean"}}
    hooks = HookSettings.from_file_data(
        {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [
                        {
                            "command": f'echo pre >> {ran}; case "$(cat)" in *rm*) '
                            "echo 'no deletes' >&2; exit 2;; esac"
                        }
                    ],
                }
            ],
            "PostToolUse": [
                {"matcher": "Bash", "hooks": [{"command": f"echo '{json.dumps(post)}'"}]}
            ],
            "UserPromptSubmit": [{"hooks": [{"command": "cat >/dev/null; echo 'it is Monday'"}]}],
            "Stop": [{"hooks": [{"command": stop_once}]}],
        }
    )
    responses = [bash("rm -rf data"), bash("echo made > made.txt"), {"text": "made it"}, FINISH]
    conversation = recorded(store, workspace, responses, hooks=hooks, sandbox={"kind": "none"})
    path = store.path_to_root(conversation, store.head(conversation))
    assert any(isinstance(e, UserRejectionEvent) and e.rejected_by == "hook" for e in path)
    assert [e.text for e in path if isinstance(e, MessageEvent) and e.source == "hook"] == [
        "it is Monday",
        "check the file first",
    ]
    runs_before = ran.read_text()
    report = replay_recorded(store, conversation)
    assert report.divergences == []
    assert report.replayed_events == report.recorded_events == len(path)
    assert ran.read_text() == runs_before  # no hook ran during the replay
