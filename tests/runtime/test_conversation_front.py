"""How a Conversation comes to be and says no: ``create`` only creates and ``open`` only
reopens; the runtime masks the model key it is given and reads no environment; what it cannot
do now is a domain error (``ConversationBusy``, ``NothingPending``, ``NotWaiting``,
``NotPending``), one ``ConversationError`` each."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from treadle.runtime.conversation import Conversation
from treadle.runtime.errors import (
    ConversationBusy,
    ConversationError,
    NothingPending,
    NotPending,
    NotRunnable,
    NotWaiting,
)
from treadle.runtime.settings import ConversationSettings
from treadle.runtime.status import ConversationStatus as Status
from treadle.store.base import ConversationExists, ConversationNotFound

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}
RISKY = {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo hi"}}]}
RUNTIME = Path(__file__).parents[2] / "src" / "treadle" / "runtime"


def test_create_refuses_an_id_that_exists_and_leaves_it_untouched(store, workspace):
    first = ConversationSettings.scripted_inline([FINISH], workspace)
    with Conversation.create(store, first, id="taken", title="the first") as conv:
        conv.send_message("hello")
    before = store.get_conversation("taken")
    other = ConversationSettings.scripted_inline([FINISH, FINISH], workspace / "other")
    with pytest.raises(ConversationExists, match="taken"):
        Conversation.create(store, other, id="taken", title="the second")
    after = store.get_conversation("taken")
    assert (after.title, after.metadata, after.event_count) == (
        before.title,
        before.metadata,
        before.event_count,
    )
    with Conversation.open(store, "taken") as reopened:  # open is how to continue it
        assert [e.kind for e in reopened.active_path()] == ["system_prompt", "message"]


def test_open_needs_a_stored_conversation_with_settings(store):
    with pytest.raises(ConversationNotFound):
        Conversation.open(store, "nobody")
    store.create_conversation("imported")  # no runtime settings, as an import leaves it
    with pytest.raises(NotRunnable, match="no runtime settings"):
        Conversation.open(store, "imported")


def test_the_model_key_is_masked_when_given_and_never_read_from_the_environment(
    store, workspace, monkeypatch
):
    key = "sk-model-key-0123456789"
    monkeypatch.setenv("TREADLE_API_KEY", "sk-environment-key-0123456789")
    command = {"tool_calls": [{"name": "terminal", "arguments": {"command": f"echo {key}"}}]}
    settings = ConversationSettings.scripted_inline([command, FINISH], workspace)
    with Conversation.create(store, settings) as conv:
        assert "TREADLE_API_KEY" not in conv.secrets  # the environment is the caller's to read
    with Conversation.create(store, settings, model_key=key) as conv:
        assert "TREADLE_API_KEY" in conv.secrets
        assert conv.secrets.env() == {}  # masked only: never given to a tool
        conv.send_message("print it")
        assert conv.run() is Status.FINISHED
        output = next(e.content for e in conv.active_path() if e.kind == "observation")
    assert key not in output
    assert "<secret:TREADLE_API_KEY>" in output


ENVIRONMENT_READS_ALLOWED = {
    # Configures LiteLLM (its price map from its own package, so it works offline): sets a
    # default for the library, reads nothing the runtime acts on.
    ("llm/litellm_model.py", 'os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")'),
}


def test_the_runtime_reads_no_environment():
    """The environment is read at the edges (``treadle.environment``, used by the CLI and the
    server) and handed in as values: no module under runtime/ (llm/ included) reads it."""
    found = set()
    for path in sorted(RUNTIME.rglob("*.py")):
        module = path.relative_to(RUNTIME).as_posix()
        text = path.read_text()
        assert "getenv" not in text, module
        for edge in ("from treadle.environment", "import treadle.environment"):
            assert edge not in text, module  # the edge's reader is not the runtime's
        for line in text.splitlines():
            if "os.environ" in line:
                allowed = [a for m, a in ENVIRONMENT_READS_ALLOWED if m == module and a in line]
                assert allowed, f"{module} reads the environment: {line.strip()}"
                found.add((module, allowed[0]))
    assert found == ENVIRONMENT_READS_ALLOWED  # each exception still needed


def test_what_a_conversation_cannot_do_now_is_a_domain_error(store, workspace):
    settings = ConversationSettings.scripted_inline(
        [RISKY, FINISH], workspace, confirmation="always"
    )
    with Conversation.create(store, settings) as conv:
        with pytest.raises(NothingPending, match="no call is waiting for confirmation"):
            conv.confirm()
        with pytest.raises(NothingPending):
            conv.check_pending()
        conv.send_message("say hi")
        assert conv.run() is Status.WAITING_FOR_CONFIRMATION
        (pending,) = conv.pending_actions()
        with pytest.raises(NotPending, match=f"not pending: nope; pending calls: {pending.id}"):
            conv.reject(["nope"])
        assert conv.check_pending() == [pending]
        # A call without a result while the log says the run goes on: running, not waiting.
        conv.log.record_status(Status.RUNNING, None)  # as another process would
        with pytest.raises(NotWaiting, match="status running"):
            conv.check_pending([pending.id])
        conv.log.record_status(Status.WAITING_FOR_CONFIRMATION, None)

        entered, release = threading.Event(), threading.Event()

        def hold_the_run(stored) -> None:
            if stored.event.kind == "observation":
                entered.set()
                release.wait(10)

        conv.callbacks.append(hold_the_run)
        runner = threading.Thread(target=conv.confirm)
        runner.start()
        try:
            assert entered.wait(10)
            with pytest.raises(ConversationBusy, match="already running"):
                conv.run()
        finally:
            release.set()
            runner.join(10)
        assert conv.status is Status.IDLE
    for error in (ConversationBusy, NothingPending, NotPending, NotWaiting, NotRunnable):
        assert issubclass(error, ConversationError)


def test_open_runs_a_conversation_without_settings_with_the_ones_it_is_offered(store, workspace):
    store.create_conversation("imported", title="kept", metadata={"origin": "import"})
    offered = ConversationSettings.scripted_inline([FINISH], workspace)
    with Conversation.open(store, "imported", settings_if_missing=offered) as conv:
        conv.send_message("go on")
        assert conv.run() is Status.FINISHED
    info = store.get_conversation("imported")
    # Storing them is the caller's (under its run lease): open leaves the metadata as it was.
    assert (info.title, info.metadata) == ("kept", {"origin": "import"})
    stored = ConversationSettings.scripted_inline([FINISH], workspace / "stored")
    store.update_conversation("imported", metadata={"settings": stored.to_metadata()})
    with Conversation.open(store, "imported", settings_if_missing=offered) as again:
        assert again.workspace.root == Path(stored.workspace)  # stored settings win
