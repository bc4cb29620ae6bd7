"""Hooks (docs/hooks.md) in the run loop, with real hook processes and real bash: what a
PreToolUse, PostToolUse, UserPromptSubmit and Stop hook decides, failing closed, timeouts that
kill the hook's processes, workspace hooks only when trusted, a client's hooks only sandboxed,
and the ``hook`` fact of every run."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from support.processes import host_pids_with
from support.waiting import wait_until
from treadle.data.hooks import HookCommand, HookSettings
from treadle.data.settings import SandboxSettings
from treadle.events.audit import audit_events
from treadle.events.model import MessageEvent, StateChangeEvent, UserRejectionEvent
from treadle.runtime.confirmation import ConfirmationPolicy
from treadle.runtime.conversation import Conversation
from treadle.runtime.hooks import (
    HOOK_KEY,
    MAX_STOP_CONTINUATIONS,
    HookSettingsError,
    PromptBlocked,
    read_hook_file,
)
from treadle.runtime.hooks import process as hook_process
from treadle.runtime.hooks.process import run_hook
from treadle.runtime.hooks.sources import workspace_declares_hooks
from treadle.runtime.settings import (
    ConversationSettings,
    HostAllows,
    SandboxRefused,
    SettingsPolicy,
)
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.workspace import check_bubblewrap
from treadle.runtime.workspace.local import LocalWorkspace
from treadle.runtime.workspace.shell import PidsCgroup
from treadle.store.base import EventStore
from treadle.store.openhands import export_conversation, import_conversation
from treadle.store.urls import open_store

NO_SANDBOX = SandboxSettings(kind="none")
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
BLOCK_RM = """#!/bin/sh
input=$(cat)
case "$input" in
  *"rm -rf"*) echo "recursive deletes are refused by policy" >&2; exit 2;;
esac
exit 0
"""


def terminal(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


def script_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def hooks(event: str, command: str, matcher: str = "terminal", **options: Any) -> HookSettings:
    entry = {"type": "command", "command": command, **options}
    return HookSettings.from_file_data({"hooks": {event: [{"matcher": matcher, "hooks": [entry]}]}})


def start(
    store: EventStore,
    workspace: Path,
    responses: list[dict[str, Any]],
    hook_settings: HookSettings | None,
    **fields: Any,
) -> Conversation:
    fields.setdefault("sandbox", NO_SANDBOX)
    settings = ConversationSettings.scripted_inline(
        responses, workspace, hooks=hook_settings, **fields
    )
    return Conversation.create(store, settings)


def hook_facts(store: EventStore, conversation: Conversation) -> list[dict[str, Any]]:
    events = [item.event for item in store.get_range(conversation.id, 0, 10**6)]
    return [
        dict(event.value)
        for event in events
        if isinstance(event, StateChangeEvent) and event.key == HOOK_KEY
    ]


def rejection(conversation: Conversation) -> UserRejectionEvent:
    (found,) = [e for e in conversation.active_path() if isinstance(e, UserRejectionEvent)]
    return found


def test_a_pretooluse_hook_blocks_rm_rf_and_the_model_is_told_why(store, workspace, tmp_path):
    (workspace / "precious.txt").write_text("keep me")
    guard = script_file(tmp_path, "guard.sh", BLOCK_RM)
    responses = [terminal("rm -rf precious.txt"), terminal("echo fine > ok.txt"), FINISH]
    with start(store, workspace, responses, hooks("PreToolUse", str(guard), "Bash")) as run:
        run.send_message("clean up")
        assert run.run() is Status.FINISHED
        refused = rejection(run)
        assert (refused.rejected_by, refused.source) == ("hook", "hook")
        assert "recursive deletes are refused by policy" in refused.reason
        # The next request holds the reason, as the tool's answer to the blocked call.
        told = [m for m in run.messages() if m["role"] == "tool"]
        assert "recursive deletes are refused by policy" in told[0]["content"]
        assert told[0]["tool_call_id"] == refused.tool_call_id
    assert (workspace / "precious.txt").read_text() == "keep me"
    assert (workspace / "ok.txt").read_text() == "fine\n"  # the allowed call ran
    facts = hook_facts(store, run)
    assert [(f["hook"], f["exit_code"], f["decision"]) for f in facts] == [
        ("PreToolUse", 2, "block"),
        ("PreToolUse", 0, "none"),
    ]
    assert set(facts[0]) == {"hook", "command", "exit_code", "seconds", "decision", "action_id"}
    assert facts[0]["command"] == str(guard)
    assert facts[0]["action_id"] == refused.action_id
    assert facts[0]["seconds"] >= 0


def test_a_json_deny_reply_blocks_with_its_reason(store, workspace, tmp_path):
    reply = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no network tools today",
        }
    }
    deny = script_file(
        tmp_path, "deny.sh", f"#!/bin/sh\ncat >/dev/null\necho '{json.dumps(reply)}'\n"
    )
    responses = [terminal("curl example.com"), FINISH]
    with start(store, workspace, responses, hooks("PreToolUse", str(deny), "terminal")) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
        assert rejection(run).reason == "blocked by a PreToolUse hook: no network tools today"
    assert hook_facts(store, run)[0]["decision"] == "block"


def test_the_older_decision_block_reply_blocks_too(store, workspace):
    command = """cat >/dev/null; echo '{"decision": "block", "reason": "old style no"}'"""
    with start(store, workspace, [terminal("true"), FINISH], hooks("PreToolUse", command)) as run:
        run.send_message("go")
        run.run()
        assert rejection(run).reason.endswith("old style no")


def test_a_hook_past_its_timeout_is_killed_with_its_children_and_blocks(store, workspace):
    marker = "treadle-hook-timeout-marker"
    # A background child of its own as well: both must be gone after the run.
    command = f"sleep 317 & sleep 318 # {marker}"
    slow = hooks("PreToolUse", command, timeout=1)
    with start(store, workspace, [terminal("echo ran > ran.txt"), FINISH], slow) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
        reason = rejection(run).reason
    assert "timed out after 1 s" in reason
    assert "fail closed" in reason
    assert not (workspace / "ran.txt").exists()
    (fact,) = hook_facts(store, run)
    assert (fact["exit_code"], fact["decision"]) == (None, "block")
    assert "timed out" in fact["failure"]
    assert host_pids_with(marker) == []
    assert host_pids_with("sleep 317") == []


def test_what_a_hook_leaves_running_is_killed_when_it_exits(store, workspace):
    command = "(sleep 319 &) ; sleep 320 & exit 0"
    with start(store, workspace, [terminal("true"), FINISH], hooks("PreToolUse", command)) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
    assert [f["decision"] for f in hook_facts(store, run)] == ["none"]
    assert host_pids_with("sleep 319") == []
    assert host_pids_with("sleep 320") == []


def test_a_double_forked_daemon_of_a_hook_is_killed_by_its_cgroup(store, workspace, monkeypatch):
    probe = PidsCgroup.create(8)
    if probe is None:
        pytest.skip("this process cannot make a pids cgroup (not root on cgroup v1)")
    probe.kill()
    made: list[Path] = []
    create = PidsCgroup.create

    def recorded(maximum: int) -> PidsCgroup | None:
        cgroup = create(maximum)
        if cgroup is not None:
            made.append(cgroup.path)
        return cgroup

    # Other tests on the machine make cgroups too: follow the hook's own.
    monkeypatch.setattr(hook_process.PidsCgroup, "create", staticmethod(recorded))
    command = "(setsid sleep 321 &) ; exit 0"  # left the session and was reparented
    with start(store, workspace, [terminal("true"), FINISH], hooks("PreToolUse", command)) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
    assert host_pids_with("sleep 321") == []
    assert len(made) == 1
    assert not made[0].exists()  # removed after the run


def test_on_failure_allow_lets_a_timed_out_hook_allow_the_call(store, workspace):
    slow = hooks("PreToolUse", "sleep 30", timeout=0.5, on_failure="allow")
    with start(store, workspace, [terminal("echo ran > ran.txt"), FINISH], slow) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
    assert (workspace / "ran.txt").read_text() == "ran\n"
    (fact,) = hook_facts(store, run)
    assert (fact["exit_code"], fact["decision"]) == (None, "none")


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("echo broken >&2; exit 1", "exited 1: broken"),
        ("exec /no/such/interpreter", "exited 127"),
        ("kill -9 $$", "killed by signal SIGKILL"),
        ("echo '{not json'", "cannot be read"),
        (
            "python3 -c \"print('{\\\"a\\\": ' + '[' * 30000 + ']' * 30000 + '}')\"",
            "cannot be read",
        ),
        ("echo '{\"decision\": NaN}'", "cannot be read"),
    ],
)
def test_a_crashed_hook_fails_closed(store, workspace, command, said):
    with start(
        store, workspace, [terminal("echo ran > ran.txt"), FINISH], hooks("PreToolUse", command)
    ) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
        assert said in rejection(run).reason
    assert not (workspace / "ran.txt").exists()


def test_an_allow_decision_never_skips_confirmation_and_ask_asks(store, workspace):
    allow = '{"hookSpecificOutput": {"permissionDecision": "allow"}}'
    with start(
        store,
        workspace,
        [terminal("echo ran > ran.txt"), FINISH],
        hooks("PreToolUse", f"echo '{allow}'"),
        confirmation=ConfirmationPolicy.ALWAYS,
    ) as run:
        run.send_message("go")
        assert run.run() is Status.WAITING_FOR_CONFIRMATION
    assert not (workspace / "ran.txt").exists()
    ask = '{"hookSpecificOutput": {"permissionDecision": "ask"}}'
    with start(
        store,
        workspace,
        [terminal("echo ran > ran.txt"), FINISH],
        hooks("PreToolUse", f"echo '{ask}'"),
    ) as run:
        run.send_message("go")
        # Confirmation mode is off, yet the hook's "ask" makes the call wait for the user.
        assert run.run() is Status.WAITING_FOR_CONFIRMATION
        assert hook_facts(store, run)[-1]["ask"] is True
        run.confirm()
        assert run.run() is Status.FINISHED
    assert (workspace / "ran.txt").read_text() == "ran\n"


def test_posttooluse_context_is_added_to_the_result(store, workspace):
    reply = {
        "hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "additionalContext": "lint says: 2 warnings",
        }
    }
    # The hook reads its input: it sees the tool's response.
    command = (
        'python3 -c "import json,sys; d=json.load(sys.stdin); '
        "assert d['tool_response']['content'].startswith('hello'), d; "
        f'print(json.dumps({reply!r}))"'
    )
    post = hooks("PostToolUse", command, "terminal")
    with start(store, workspace, [terminal("echo hello"), FINISH], post) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
        result = next(e for e in run.active_path() if e.kind == "observation")
    assert result.content.startswith("hello")
    assert result.content.endswith("[hook] lint says: 2 warnings")
    (fact,) = hook_facts(store, run)
    assert (fact["hook"], fact["decision"]) == ("PostToolUse", "context")
    assert fact["action_id"] == result.action_id


def test_matchers_follow_the_tool_name(store, workspace):
    marker = workspace / "fired"
    hook_settings = HookSettings.from_file_data(
        {
            "PreToolUse": [
                {"matcher": "file_.*", "hooks": [{"command": f"echo edit >> {marker}"}]},
                {"matcher": "Bash", "hooks": [{"command": f"echo bash >> {marker}"}]},
                {"matcher": "think", "hooks": [{"command": f"echo think >> {marker}"}]},
            ]
        }
    )
    think = {"tool_calls": [{"name": "task_tracker", "arguments": {"command": "view"}}]}
    with start(store, workspace, [terminal("true"), think, FINISH], hook_settings) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
    assert marker.read_text() == "bash\n"  # "Bash" matches terminal; the others matched nothing


def test_a_userpromptsubmit_hook_blocks_a_prompt_or_adds_context(store, workspace):
    command = (
        'input=$(cat); case "$input" in *secret-project*) echo "not that one" >&2; exit 2;; esac; '
        "echo 'today is a holiday'"
    )
    with start(store, workspace, [FINISH], hooks("UserPromptSubmit", command)) as run:
        with pytest.raises(PromptBlocked, match="not that one"):
            run.send_message("work on secret-project")
        assert [e for e in run.active_path() if e.kind == "message"] == []
        run.send_message("work on the site")
        user, context = [e for e in run.active_path() if isinstance(e, MessageEvent)]
        assert user.text == "work on the site"
        assert (context.source, context.text) == ("hook", "today is a holiday")
        # The model gets both, in one user turn.
        assert run.messages()[-1] == {
            "role": "user",
            "content": [
                {"type": "text", "text": "work on the site"},
                {"type": "text", "text": "today is a holiday"},
            ],
        }
    decisions = [f["decision"] for f in hook_facts(store, run)]
    assert decisions == ["block", "context"]


def test_a_stop_hook_keeps_the_agent_going_a_bounded_number_of_times(store, workspace):
    command = 'cat >/dev/null; echo \'{"decision": "block", "reason": "run the tests first"}\''
    answers = [{"text": f"done {n}"} for n in range(MAX_STOP_CONTINUATIONS + 2)]
    with start(store, workspace, answers, hooks("Stop", command)) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
        kept_going = [e for e in run.active_path() if e.source == "hook"]
        assert len(kept_going) == MAX_STOP_CONTINUATIONS
        assert all(e.text == "run the tests first" for e in kept_going)
        said = [e.text for e in run.active_path() if e.kind == "message" and e.source == "agent"]
        assert said == [f"done {n}" for n in range(MAX_STOP_CONTINUATIONS + 1)]


def test_workspace_hooks_run_only_when_trusted(store, workspace):
    (workspace / ".treadle").mkdir()
    (workspace / ".treadle" / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": "terminal", "hooks": [{"command": "echo no >&2; exit 2"}]}
                    ]
                }
            }
        )
    )
    with start(store, workspace, [terminal("echo ran > ran.txt"), FINISH], None) as run:
        assert run.hooks.ignored_workspace_file == workspace / ".treadle" / "settings.json"
        run.send_message("go")
        assert run.run() is Status.FINISHED
    assert (workspace / "ran.txt").exists()
    assert hook_facts(store, run) == []
    (workspace / "ran.txt").unlink()
    responses = [terminal("echo ran > ran.txt"), FINISH]
    with start(store, workspace, responses, None, trust_workspace_hooks=True) as run:
        assert run.hooks.ignored_workspace_file is None
        run.send_message("go")
        assert run.run() is Status.FINISHED
        assert rejection(run).reason.endswith("no")
    assert not (workspace / "ran.txt").exists()


def test_hooks_are_stored_with_the_conversation_and_apply_when_reopened(store, workspace):
    command = "echo reopened-guard >&2; exit 2"
    responses = [FINISH, terminal("echo ran > ran.txt"), FINISH]
    with start(store, workspace, responses, hooks("PreToolUse", command)) as first:
        first.send_message("go")
        assert first.run() is Status.FINISHED
    with Conversation.open(store, first.id) as again:  # as another process would
        again.send_message("more")
        assert again.run() is Status.FINISHED
        assert rejection(again).reason.endswith("reopened-guard")
    assert not (workspace / "ran.txt").exists()


def test_a_server_refuses_a_clients_hooks_outside_a_sandbox(store, workspace):
    server = SettingsPolicy(allows=HostAllows(trusted=False, sandbox_limit=NO_SANDBOX))
    for fields in ({"hooks": hooks("PreToolUse", "true")}, {"trust_workspace_hooks": True}):
        settings = ConversationSettings.scripted_inline(
            [FINISH], workspace, sandbox=NO_SANDBOX, **fields
        )
        with pytest.raises(SandboxRefused, match="only in a sandbox"):
            Conversation.create(store, settings, policy=server)
    assert store.list_conversations() == []


def test_hook_files_refuse_unknown_events_and_bad_matchers(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": [{"command": "x"}]}]}}))
    with pytest.raises(HookSettingsError, match="'SessionStart' are not run by Treadle"):
        read_hook_file(path)
    path.write_text(
        json.dumps({"hooks": {"PreToolUse": [{"matcher": "(", "hooks": [{"command": "x"}]}]}})
    )
    with pytest.raises(HookSettingsError, match="not a regular expression"):
        read_hook_file(path)
    path.write_text(
        json.dumps({"permissions": {}, "hooks": {"Stop": [{"hooks": [{"command": "x"}]}]}})
    )
    assert read_hook_file(path).Stop[0].hooks[0].timeout == 60


class TestInTheSandbox:
    @pytest.fixture(autouse=True)
    def _bubblewrap(self) -> None:
        try:
            check_bubblewrap()
        except Exception as problem:  # CI installs bubblewrap (make test)
            pytest.skip(f"bubblewrap cannot run here: {problem}")

    def test_a_users_hook_script_is_mounted_and_runs_sandboxed(self, store, workspace, tmp_path):
        (workspace / "precious.txt").write_text("keep me")
        guard = script_file(tmp_path, "guard.sh", BLOCK_RM)
        # It sees the sandbox's /proc (its own namespace), not the host's.
        probe = script_file(
            tmp_path,
            "probe.sh",
            "#!/bin/sh\ncat >/dev/null\nls /proc | grep -c '^[0-9]' >&2\nexit 2\n",
        )
        settings = HookSettings.from_file_data(
            {"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": str(guard)}]}]}
        )
        responses = [terminal("rm -rf precious.txt"), FINISH]
        with start(store, workspace, responses, settings, sandbox=SandboxSettings()) as run:
            run.send_message("go")
            assert run.run() is Status.FINISHED
            assert "refused by policy" in rejection(run).reason
        assert (workspace / "precious.txt").exists()
        with start(
            store,
            workspace,
            [terminal("true"), FINISH],
            hooks("PreToolUse", str(probe)),
            sandbox=SandboxSettings(),
        ) as run:
            run.send_message("go")
            run.run()
            processes = int(rejection(run).reason.rsplit(" ", 1)[1])
        assert processes < 10

    def test_a_clients_hook_gets_no_host_file_mounted(self, store, workspace, tmp_path):
        private = tmp_path / "host-only.txt"
        private.write_text("host secret")
        server = SettingsPolicy(allows=HostAllows(trusted=False))
        settings = ConversationSettings.scripted_inline(
            [terminal("true"), FINISH],
            workspace,
            hooks=hooks("PreToolUse", f"cat {private} >&2; exit 2"),
        )
        with Conversation.create(store, settings, policy=server) as run:
            run.send_message("go")
            run.run()
            reason = rejection(run).reason
        assert "host secret" not in reason
        assert "No such file or directory" in reason


def test_a_workspace_settings_link_leading_out_is_ignored_untrusted_refused_trusted(
    store, workspace, tmp_path
):
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"command": "true"}]}]}}))
    (workspace / ".treadle").mkdir()
    (workspace / ".treadle" / "settings.json").symlink_to(outside)
    with start(store, workspace, [FINISH], None) as run:  # the agent cannot break the run
        assert run.hooks.ignored_workspace_file == workspace / ".treadle" / "settings.json"
    with pytest.raises(HookSettingsError, match="outside the workspace"):
        start(store, workspace, [FINISH], None, trust_workspace_hooks=True)


def test_a_stop_hook_saying_continue_false_ends_the_turn(store, workspace):
    command = 'cat >/dev/null; echo \'{"continue": false, "stopReason": "enough"}\''
    with start(
        store, workspace, [{"text": "done"}, {"text": "again"}], hooks("Stop", command)
    ) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
        assert [e.source for e in run.active_path() if e.kind == "message"] == ["user", "agent"]


def test_an_interrupt_stops_a_hook_in_progress_and_pauses_the_run(store, workspace):
    started = workspace / "hook-started"
    command = f"touch {started}; sleep 322"
    responses = [terminal("echo ran > ran.txt"), FINISH]
    with start(store, workspace, responses, hooks("PreToolUse", command, timeout=600)) as run:
        run.send_message("go")
        ended: list[Status] = []
        runner = threading.Thread(target=lambda: ended.append(run.run()))
        runner.start()
        wait_until(started.exists, what="the hook to start")
        run.interrupt()
        runner.join(timeout=60)
        assert ended == [Status.PAUSED]
        assert "the user interrupted the run" in rejection(run).reason
    assert not (workspace / "ran.txt").exists()
    assert host_pids_with("sleep 322") == []


def test_a_failed_posttooluse_hook_changes_nothing_and_is_recorded(store, workspace):
    post = hooks("PostToolUse", "echo broken >&2; exit 1")
    with start(store, workspace, [terminal("echo hello"), FINISH], post) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
        result = next(e for e in run.active_path() if e.kind == "observation")
    assert "[hook]" not in result.content
    (fact,) = hook_facts(store, run)
    assert (fact["exit_code"], fact["decision"], fact["failure"]) == (1, "none", "exited 1: broken")


def test_secrets_in_a_hooks_command_and_reason_are_masked(store, workspace):
    key = "sk-hook-secret-0123456789abcdef"
    settings = ConversationSettings.scripted_inline(
        [terminal("true"), FINISH],
        workspace,
        sandbox=NO_SANDBOX,
        hooks=hooks("PreToolUse", f"echo 'leaked {key}' >&2; exit 2"),
    )
    with Conversation.create(store, settings, model_key=key) as run:
        run.send_message("go")
        run.run()
        assert key not in rejection(run).reason
        assert "<secret:TREADLE_API_KEY>" in rejection(run).reason
    (fact,) = hook_facts(store, run)
    assert key not in fact["command"]


def test_hook_events_survive_an_openhands_export_and_import(store, workspace, tmp_path):
    command = "echo 'a hook said no' >&2; exit 2"
    prompt = hooks("UserPromptSubmit", "cat >/dev/null; echo 'context from a hook'")
    both = prompt.merged(hooks("PreToolUse", command))
    with start(store, workspace, [terminal("true"), FINISH], both) as run:
        run.send_message("go")
        assert run.run() is Status.FINISHED
    folder = tmp_path / "sdk"
    export_conversation(store, run.id, folder)
    other = open_store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        result = import_conversation(other, folder)
        assert result.problems == [], result.problems
        events = [item.event for item in other.get_range(result.conversation_id, 0, 10**6)]
    finally:
        other.close()
    assert audit_events(events).clean
    facts = [e for e in events if isinstance(e, StateChangeEvent) and e.key == HOOK_KEY]
    assert [fact.value["hook"] for fact in facts] == ["UserPromptSubmit", "PreToolUse"]
    (refused,) = [e for e in events if isinstance(e, UserRejectionEvent)]
    assert (refused.rejected_by, refused.reason) == (
        "hook",
        "blocked by a PreToolUse hook: a hook said no",
    )
    assert [e.text for e in events if isinstance(e, MessageEvent) and e.source == "hook"] == [
        "context from a hook"
    ]


def test_hook_runs_leave_no_descriptor_thread_or_process_behind(workspace):
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    local = LocalWorkspace(workspace)
    command = HookCommand(command="cat; sleep 323 & echo done")
    run_hook(command, {"warm": True}, local, mount_files=False)  # imports, caches
    fds, threads = open_fds(), threading.active_count()
    for number in range(5):
        done = run_hook(command, {"number": number}, local, mount_files=False)
        assert (done.exit_code, done.stdout) == (0, f'{{"number": {number}}}done\n')
    assert (open_fds(), threading.active_count()) == (fds, threads)
    assert host_pids_with("sleep 323") == []


def test_a_backtracking_matcher_runs_out_of_time_and_its_hook_runs():
    # (a|aa)*[bc] on 60 a's backtracks for ever with `re` (holding the interpreter, so a
    # client's matcher would stop a whole server); the model chooses the tool name.
    settings = HookSettings.from_file_data(
        {
            "PreToolUse": [
                {"matcher": "(a|aa)*[bc]", "hooks": [{"command": "slow"}]},
                {"matcher": "terminal", "hooks": [{"command": "exact"}]},
            ]
        }
    )
    assert [hook.command for hook in settings.commands("PreToolUse", "a" * 60)] == ["slow"]
    assert [hook.command for hook in settings.commands("PreToolUse", "terminal")] == ["exact"]
    assert settings.commands("PreToolUse", "ab") == [HookCommand(command="slow")]


def test_a_settings_file_nesting_too_deep_is_refused_not_a_crash(tmp_path):
    # The workspace's own file is the agent's or a cloned repository's: 100,000 brackets ended
    # json.loads in a RecursionError where a HookSettingsError (or "ignored") was due.
    path = tmp_path / "settings.json"
    path.write_text('{"hooks": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(HookSettingsError, match="MAX_JSON_DEPTH"):
        read_hook_file(path)
    assert workspace_declares_hooks(path)  # unreadable: said as ignored all the same
