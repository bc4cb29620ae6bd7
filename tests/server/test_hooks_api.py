"""Hooks on a real server: the operator's ``treadle serve --hooks`` run in every conversation;
the hooks a client sends are refused (403 sandbox_refused) unless its conversation is sandboxed,
and then run in its sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.scripts import assert_store_audits_clean
from support.server_process import ServerProcess
from treadle.client import RemoteError, TreadleClient
from treadle.data.hooks import HookSettings
from treadle.data.settings import SandboxSettings
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status
from treadle.runtime.workspace import check_bubblewrap

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
DELETE = {"tool_calls": [{"name": "terminal", "arguments": {"command": "rm -rf data"}}]}


def refuse(reason: str) -> dict:
    entry = {"type": "command", "command": f"echo '{reason}' >&2; exit 2"}
    return {"PreToolUse": [{"matcher": "Bash", "hooks": [entry]}]}


@pytest.fixture
def operator_server(store_url: str, tmp_path: Path):
    hooks = tmp_path / "operator-hooks.json"
    prompt = "case \"$(cat)\" in *forbidden-topic*) echo 'not here' >&2; exit 2;; esac"
    operator = {
        **refuse("the operator forbids this"),
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": prompt}]}],
    }
    hooks.write_text(json.dumps({"hooks": operator}))
    server = ServerProcess(
        store_url, log_dir=tmp_path, extra_args=("--sandbox", "none", "--hooks", str(hooks))
    ).start()
    yield server
    server.stop()
    assert_store_audits_clean(store_url)


def test_operator_hooks_run_and_a_clients_hooks_need_a_sandbox(operator_server, tmp_path):
    workspace = tmp_path / "workspace"
    (workspace / "data").mkdir(parents=True)
    unsandboxed = SandboxSettings(kind="none")
    with TreadleClient(operator_server.base_url) as client:
        plain = ConversationSettings.scripted_inline(
            [DELETE, FINISH], workspace, sandbox=unsandboxed
        )
        conversation = client.create_conversation(plain)
        with pytest.raises(RemoteError) as blocked:
            conversation.send_message("talk about the forbidden-topic")
        assert (blocked.value.status, blocked.value.code) == (403, "prompt_blocked")
        assert "not here" in blocked.value.message
        conversation.send_message("tidy")
        assert conversation.run() is Status.FINISHED
        (rejected,) = [e for e in conversation.active_path() if e.kind == "user_rejection"]
        assert rejected.rejected_by == "hook"
        assert rejected.reason.endswith("the operator forbids this")
        assert (workspace / "data").is_dir()

        own = HookSettings.model_validate(refuse("the client forbids this"))
        for fields in ({"hooks": own}, {"trust_workspace_hooks": True}):
            with pytest.raises(RemoteError) as refused:
                client.create_conversation(plain.model_copy(update=fields))
            assert (refused.value.status, refused.value.code) == (403, "sandbox_refused")
            assert "only in a sandbox" in refused.value.message
        assert len(client.list_conversations().items) == 1  # nothing more was made

        try:
            check_bubblewrap()
        except Exception:  # CI installs bubblewrap (make test)
            return
        sandboxed = plain.model_copy(update={"sandbox": SandboxSettings(), "hooks": own})
        conversation = client.create_conversation(sandboxed)
        conversation.send_message("tidy")
        assert conversation.run() is Status.FINISHED
        (rejected,) = [e for e in conversation.active_path() if e.kind == "user_rejection"]
        # The operator's hooks run first, then the client's: both blocked it.
        assert "the operator forbids this" in rejected.reason
        assert rejected.reason.endswith("the client forbids this")
