"""A pause keeps the reason of whoever asked for it (the user's by default), and a process's
masked-only values (a server's client API keys) are masked in every conversation it opens,
never given to a tool."""

from __future__ import annotations

from treadle.runtime.conversation import USER_PAUSE, Conversation
from treadle.runtime.secrets import Secrets
from treadle.runtime.settings import ConversationSettings, HostAllows, HostProvides, SettingsPolicy
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.status import read_status

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
THINK = [
    {"tool_calls": [{"name": "think", "arguments": {"thought": f"step {i}"}}]} for i in range(5)
]


def test_a_pause_records_the_reason_it_was_asked_with(store, workspace):
    settings = ConversationSettings.scripted_inline([*THINK, FINISH], workspace)
    with Conversation.create(store, settings) as conv:
        conv.pause()
        assert read_status(store, conv.id) == (Status.PAUSED, USER_PAUSE)
        stop = "paused because the host stopped"

        def stop_after_one_call(stored) -> None:
            if stored.event.kind == "observation":
                conv.pause(local_only=True, reason=stop)

        conv.callbacks.append(stop_after_one_call)
        conv.send_message("think")
        assert conv.run() is Status.PAUSED
        assert read_status(store, conv.id) == (Status.PAUSED, stop)
        conv.callbacks.clear()
        conv.pause()  # the next pause is the user's again
        assert read_status(store, conv.id) == (Status.PAUSED, USER_PAUSE)


def test_masked_values_of_the_policy_are_masked_never_exported(store, workspace):
    key = "server-client-key-0123456789"
    policy = SettingsPolicy(
        allows=HostAllows(trusted=False), provides=HostProvides(masked=(key, "abc"))
    )
    assert key not in repr(policy)
    command = {"tool_calls": [{"name": "terminal", "arguments": {"command": f"echo {key}"}}]}
    settings = ConversationSettings.scripted_inline([command, FINISH], workspace)
    shared = Secrets()  # empty, still the caller's: what it registers later is masked too
    with Conversation.create(store, settings, policy=policy, secrets=shared) as conv:
        assert conv.secrets is shared
        assert "TREADLE_SERVER_API_KEY_1" in shared
        assert "TREADLE_SERVER_API_KEY_2" not in shared  # too short to mask safely
        assert shared.env() == {}  # mask only: no tool's environment gets it
        conv.send_message("print it")
        assert conv.run() is Status.FINISHED
        outputs = [e.content for e in conv.active_path() if e.kind == "observation"]
    assert key not in outputs[0]
    assert "<secret:TREADLE_SERVER_API_KEY_1>" in outputs[0]


def test_a_process_own_stop_of_a_run_that_ended_records_nothing(store, workspace):
    # A stopping server met this run while it ran; it finished before the stop reached it.
    settings = ConversationSettings.scripted_inline([FINISH, FINISH], workspace)
    with Conversation.create(store, settings) as conv:
        conv.send_message("finish")
        assert conv.run() is Status.FINISHED
        conv.pause(local_only=True, reason="paused because the server stopped")
        assert read_status(store, conv.id) == (Status.FINISHED, "the agent called finish")
        assert "pause" not in [e.kind for e in conv.active_path()]
        conv.send_message("again")  # and nothing is left to stop the next run at once
        assert conv.run() is Status.FINISHED
