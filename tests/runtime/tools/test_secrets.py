"""Secrets: masked in tool output (content, data, error messages) as they are and in hex and
base64; exported to the terminal unless masked-only; the terminal inherits no other key."""

import base64
from pathlib import Path

import pytest

from treadle.environment import shell_environment
from treadle.runtime.secrets import SecretError, Secrets
from treadle.runtime.settings import (
    ConversationSettings,
    HostProvides,
    SandboxSettings,
    SettingsPolicy,
    build_workspace,
)
from treadle.runtime.tools import TerminalTool, ToolCallError, ToolContext, ToolSet

API_KEY = "sk-test-4f9a8b7c6d5e"


def test_mask_replaces_every_value_longest_first() -> None:
    secrets = Secrets({"API_KEY": API_KEY, "PREFIX": "sk-test"})
    assert secrets.mask(f"key={API_KEY} and sk-test alone") == (
        "key=<secret:API_KEY> and <secret:PREFIX> alone"
    )
    assert secrets.mask_json({"a": [API_KEY, 3], API_KEY: None}) == {
        "a": ["<secret:API_KEY>", 3],
        "<secret:API_KEY>": None,
    }
    assert API_KEY not in repr(secrets)
    assert secrets.names() == ["API_KEY", "PREFIX"]


def test_bad_names_and_short_values_are_refused() -> None:
    secrets = Secrets()
    with pytest.raises(SecretError, match="not a valid environment variable name"):
        secrets.add("1BAD", API_KEY)
    with pytest.raises(SecretError, match="shorter than 4 characters"):
        secrets.add("SHORT", "ab")


def test_terminal_gets_secrets_as_env_and_output_is_masked(
    tools: ToolSet, context: ToolContext
) -> None:
    context.secrets.add("API_KEY", API_KEY)
    result = tools.call("terminal", {"command": 'echo "key is $API_KEY"; pwd'}, context)
    assert result.content.splitlines()[0] == "key is <secret:API_KEY>"
    assert API_KEY not in result.content


def test_secret_added_later_reaches_the_running_shell(tools: ToolSet, context: ToolContext) -> None:
    tools.call("terminal", {"command": "true"}, context)
    context.secrets.add("LATE_TOKEN", "late-token-value")
    result = tools.call("terminal", {"command": "echo ${#LATE_TOKEN} $LATE_TOKEN"}, context)
    assert result.content.splitlines()[0] == "16 <secret:LATE_TOKEN>"
    context.secrets.remove("LATE_TOKEN")
    gone = tools.call("terminal", {"command": 'echo "[$LATE_TOKEN]"'}, context)
    assert gone.content.splitlines()[0] == "[]"


def test_secrets_are_masked_in_data_and_error_messages(
    tools: ToolSet, context: ToolContext
) -> None:
    context.secrets.add("API_KEY", API_KEY)
    (context.workspace.root / "conf.txt").write_text(f"token = {API_KEY}\n")
    viewed = tools.call("file_editor", {"command": "view", "path": "conf.txt"}, context)
    assert viewed.content.endswith("token = <secret:API_KEY>")

    tools.call(
        "task_tracker",
        {"command": "plan", "task_list": [{"title": f"rotate {API_KEY}"}]},
        context,
    )
    view = tools.call("task_tracker", {"command": "view"}, context)
    assert view.data["tasks"][0]["title"] == "rotate <secret:API_KEY>"

    with pytest.raises(ToolCallError) as caught:
        tools.call("file_editor", {"command": "view", "path": f"{API_KEY}.txt"}, context)
    assert (
        caught.value.message
        == "<secret:API_KEY>.txt does not exist: check the path (view '.' lists the workspace)"
    )

    with pytest.raises(ToolCallError) as invalid:
        tools.call("think", {"thought": ["x" * 60, API_KEY]}, context)
    assert invalid.value.message.startswith(
        "Invalid arguments for think: thought: Input should be a valid string (got ['xxx"
    )
    assert API_KEY[:6] not in invalid.value.message  # masked before the quote was shortened


def test_a_secret_split_by_a_cut_is_masked_on_both_sides() -> None:
    secrets = Secrets({"API_KEY": API_KEY})
    before, after = secrets.mask_around_cut("text sk-test-4f", "a8b7c6d5e more")
    assert (before, after) == ("text <secret:API_KEY>", "<secret:API_KEY> more")
    # Fragments shorter than the minimum length are ordinary text.
    assert secrets.mask_around_cut("ends with sk-", "5e") == ("ends with sk-", "5e")


def test_truncated_terminal_output_never_shows_part_of_a_secret(context: ToolContext) -> None:
    context.secrets.add("API_KEY", API_KEY)
    tools = ToolSet([TerminalTool(max_output_bytes=2000)])
    try:
        # 995 bytes, then the key: the 1000-byte head ends with its first 5 characters.
        result = tools.call(
            "terminal",
            {"command": "head -c 995 /dev/zero | tr '\\0' x; echo \"$API_KEY\"; seq 3000"},
            context,
        )
    finally:
        tools.close()
    head = result.content.split("\n[... ")[0]
    assert head == "x" * 995 + "<secret:API_KEY>"
    assert "sk-te" not in result.content


@pytest.mark.parametrize("prefix", ["", "a", "ab"])  # the three base64 alignments
def test_base64_and_hex_forms_are_masked_inside_longer_output(
    tools: ToolSet, context: ToolContext, prefix: str
) -> None:
    context.secrets.add("API_KEY", API_KEY)
    command = (
        f'printf %s "{prefix}$API_KEY" | base64; printf %s "{prefix}$API_KEY" | base64 -w 10; '
        f'printf %s "$API_KEY" | basenc --base64url; printf %s "{prefix}$API_KEY" | od -An -tx1 -v | tr -d " \\n"; echo; '
        f'printf %s "$API_KEY" | od -An -tx1 | tr -d " \\n" | tr a-f A-F; echo'
    )
    result = tools.call("terminal", {"command": command}, context)
    raw = API_KEY.encode()
    assert result.content.count("<secret:API_KEY>") == 5
    for encoded in (raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode()[:12]):
        assert encoded not in result.content


def test_a_wrapped_encoding_split_by_a_cut_is_masked() -> None:
    secrets = Secrets({"API_KEY": API_KEY})
    hexed = API_KEY.encode().hex()
    before, after = secrets.mask_around_cut("out " + hexed[:10], hexed[10:] + " end")
    assert (before, after) == ("out <secret:API_KEY>", "<secret:API_KEY> end")


def test_a_masked_only_secret_never_reaches_the_shell(tools: ToolSet, context: ToolContext) -> None:
    context.secrets.add("MODEL_KEY", "model-key-0123456789", export=False)
    assert context.secrets.env() == {}
    result = tools.call(
        "terminal", {"command": 'echo "[$MODEL_KEY]"; echo model-key-0123456789'}, context
    )
    assert result.content.splitlines()[:2] == ["[]", "<secret:MODEL_KEY>"]


@pytest.mark.parametrize("sandbox", ["none", "bubblewrap"])
def test_the_shell_gets_a_clean_environment(
    tools: ToolSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    monkeypatch.setenv("TREADLE_API_KEY", "sk-process-key-123456")
    monkeypatch.setenv("TREADLE_API_KEYS", "server-auth-key-123456")
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "provider-key-123456")
    settings = ConversationSettings.scripted_inline([], tmp_path / "ws")
    settings = settings.model_copy(update={"sandbox": SandboxSettings(kind=sandbox)})
    # What the edge reads for the shell (PATH, HOME, locale), as the CLI and server pass it.
    policy = SettingsPolicy(provides=HostProvides(shell_environment=shell_environment()))
    workspace = build_workspace(settings, policy)
    context = ToolContext(workspace=workspace, secrets=Secrets(), conversation_id="env")
    result = tools.call("terminal", {"command": "env | cut -d= -f1 | sort"}, context)
    names = set(result.content.splitlines()[:-1])
    assert {"PATH", "HOME", "LANG", "TERM"} <= names
    assert not names & {"TREADLE_API_KEY", "TREADLE_API_KEYS", "SOME_PROVIDER_API_KEY"}
    home = tools.call("terminal", {"command": "echo $HOME; ls -A $HOME | wc -l"}, context)
    if sandbox == "bubblewrap":  # a private, empty HOME
        assert home.content.splitlines()[:2] == ["/home/sandbox", "0"]
